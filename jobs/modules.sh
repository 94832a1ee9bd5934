#!/usr/bin/env bash
# shellcheck shell=bash
# The one place that names the environment modules of the clusters yasgd targets.
# Sourced by jobs/install.sh for the `module load` lines it prints when a build
# prerequisite is missing; docs/cluster.md ("Installing on a GPU cluster") quotes them.
#
# The names below are the ones the sites publish in their user guides (ABCI's
# "Environment Modules" pages: NAME/SERIES/VERSION for CUDA, cuDNN and NCCL).
# Sites add and retire versions: check them against `module avail` on the login
# node before use, and override with YASGD_MODULES (jobs) or by loading other
# modules before jobs/install.sh (it reads CUDA_HOME, NCCL_HOME, PATH, CPATH).
#
# The MXNet 1.9.1 CUDA wheels link a CUDA 11 runtime and NCCL 2: mxnet-cu110
# wants CUDA 11.0 (the ABCI 2019 list), mxnet-cu112 / mxnet-cu117 a CUDA 11.2 /
# 11.7 runtime. Load a CUDA module of the wheel's major version: on ABCI 3.0 that
# means replacing the cuda/12.x module below by an 11.x one if `module avail cuda`
# lists one.

# ABCI 2019, the paper's system (Univa Grid Engine, 4 x V100 a node):
# GCC, CUDA 11.0 + cuDNN 8.0 + NCCL 2.7 (mxnet-cu110), Open MPI.
YASGD_MODULES_ABCI2019="gcc/9.3.0 cuda/11.0/11.0.3 cudnn/8.0/8.0.5 nccl/2.7/2.7.8-1 openmpi/4.0.5"

# ABCI 3.0 (PBS Professional, 8 x H200 a node): HPC-X (Open MPI + UCX), CUDA,
# cuDNN, NCCL.
YASGD_MODULES_ABCI3="hpcx/2.20 cuda/12.6/12.6.1 cudnn/9.5/9.5.1 nccl/2.23/2.23.4-1"

# yasgd_module_hints PREFIX: one `module load` line per site, each line PREFIX first.
yasgd_module_hints() {
  printf '%s ABCI 2019 (UGE): module load %s\n' "$1" "$YASGD_MODULES_ABCI2019"
  printf '%s ABCI 3.0 (PBS): module load %s\n' "$1" "$YASGD_MODULES_ABCI3"
}
