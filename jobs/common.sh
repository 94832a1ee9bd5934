#!/usr/bin/env bash
# shellcheck shell=bash
# Every tuning variable of a yasgd run, in one place. Sourced by the job scripts
# (jobs/abci/pbs/train.sh, jobs/abci/uge/train.sh, jobs/slurm/train.sbatch) and
# by `make train`/`make test`. Each one keeps a value already set in the
# environment (`VAR=... qsub ...`, `VAR=... make train`).
# None of these switches an algorithm: those live in the YAML config.
# The job scripts pass every OMP_*, KMP_*, MXNET_*, HOROVOD_*, NCCL_*, UCX_*,
# PYTHON* and YASGD_* variable on to every rank (`mpirun -x`).

# --- threads -----------------------------------------------------------------
# MXNet uses one OpenMP thread unless told: give each rank its share of cores.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
# Rank output reaches the job log line by line, not at exit.
export PYTHONUNBUFFERED="${PYTHONUNBUFFERED:-1}"

# --- Horovod -------------------------------------------------------------------
# yasgd issues one grouped allreduce per static layer group (yasgd/allreduce.py),
# so Horovod's own fusion buffer only adds a copy: it is off by default
# (`make bench-allreduce` compares this with Horovod's trainer under its defaults).
export HOROVOD_FUSION_THRESHOLD="${HOROVOD_FUSION_THRESHOLD:-0}"
# Background-thread cycle (ms). Fujitsu's MLPerf v0.6 run used 0.2 ms on GPU nodes,
# where the polling thread has a core of its own. On a CPU-only host every core
# computes, and a 0.2 ms poll steals a good part of one, which slowed training down
# markedly against a 5 ms cycle. So: 0.2 ms when GPUs are present, 5 ms otherwise.
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  export HOROVOD_CYCLE_TIME="${HOROVOD_CYCLE_TIME:-0.2}"
else
  export HOROVOD_CYCLE_TIME="${HOROVOD_CYCLE_TIME:-5}"
fi
# Response cache entries; ResNet-50 has ~160-190 gradient tensors.
export HOROVOD_CACHE_CAPACITY="${HOROVOD_CACHE_CAPACITY:-1024}"
# Two-level allreduce (intra-node, then inter-node); off on one host. On a
# cluster (ABCI) set it to 1: Fujitsu's v0.6 run used a 2-stage allreduce.
export HOROVOD_HIERARCHICAL_ALLREDUCE="${HOROVOD_HIERARCHICAL_ALLREDUCE:-0}"
# Stalls: yasgd's own watchdog (run.stall_timeout_s, yasgd/watchdog.py) aborts a
# job whose ranks stop making progress; Horovod's stall shutdown cannot, because
# its controller waits in negotiation for the missing rank. So Horovod only warns
# (naming the tensors some ranks have not submitted), earlier than the watchdog's
# floor, and its shutdown stays off (0) unless set here.
export HOROVOD_STALL_CHECK_TIME_SECONDS="${HOROVOD_STALL_CHECK_TIME_SECONDS:-60}"
export HOROVOD_STALL_SHUTDOWN_TIME_SECONDS="${HOROVOD_STALL_SHUTDOWN_TIME_SECONDS:-0}"
# Horovod's own log level (trace, debug, info, warning, error, fatal).
export HOROVOD_LOG_LEVEL="${HOROVOD_LOG_LEVEL:-warning}"

# --- MPI (OpenMPI's mpirun reads OMPI_MCA_* itself) ------------------------------
# Seconds between mpirun's SIGTERM and SIGKILL to the ranks (OpenMPI's default: 1):
# room for the SIGTERM checkpoint at the next log interval (yasgd/faults.py).
# OpenMPI 4.1 also waits about twice this long before exiting after a rank failed.
export OMPI_MCA_odls_base_sigkill_timeout="${OMPI_MCA_odls_base_sigkill_timeout:-10}"

# --- NCCL (GPU clusters) --------------------------------------------------------
# Fujitsu's MLPerf v0.6 run: 2 MB NCCL buffers.
export NCCL_BUFFSIZE="${NCCL_BUFFSIZE:-2097152}"
# 0: use InfiniBand (ABCI: EDR in 2019, NDR200 in ABCI 3.0); 1: sockets only.
export NCCL_IB_DISABLE="${NCCL_IB_DISABLE:-0}"
# NCCL's diagnostics (VERSION prints the version once; INFO for topology issues).
export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"
# NCCL_IB_HCA / UCX_NET_DEVICES are chosen per rank by jobs/bind.sh (the HCA
# nearest the rank's GPU); set them here only to force one for every rank.

# --- MXNet ---------------------------------------------------------------------
# The engine stays MXNet's default (ThreadedEnginePerDevice): setting
# MXNET_ENGINE_TYPE only makes every rank print a start-up line.
# No cuDNN autotune at start-up (it costs seconds).
export MXNET_CUDNN_AUTOTUNE_DEFAULT="${MXNET_CUDNN_AUTOTUNE_DEFAULT:-0}"
# Parameters per multi-tensor optimizer call for MXNet's built-in optimizers
# (yasgd's LARS aggregates all of them itself); MLPerf v0.6 used 55.
export MXNET_OPTIMIZER_AGGREGATION_SIZE="${MXNET_OPTIMIZER_AGGREGATION_SIZE:-55}"
# Keep mxnet's start-up quiet about the subgraph backend.
export MXNET_SUBGRAPH_VERBOSE="${MXNET_SUBGRAPH_VERBOSE:-0}"

# --- rank placement (read by jobs/bind.sh, on every rank) -----------------------
# 1: bind each rank to the NUMA node (numactl, when installed) and the HCA of
# its GPU; 0: no binding at all.
export YASGD_BIND="${YASGD_BIND:-1}"
# 1: also restrict each rank to its own GPU with CUDA_VISIBLE_DEVICES. Off by
# default: yasgd picks mx.gpu(local_rank) itself (yasgd/dist.py), and NCCL sees
# every GPU of the node for its topology.
export YASGD_BIND_CUDA_VISIBLE="${YASGD_BIND_CUDA_VISIBLE:-0}"
# Space-separated NUMA nodes / HCAs, spread over the local ranks in blocks
# (list of M entries, L local ranks: rank r gets entry r*M/L). Empty: NUMA node
# from the GPU's PCI device (else every node of /sys/devices/system/node), HCAs
# from /sys/class/infiniband. ABCI 2019 example: YASGD_HCAS="mlx5_0 mlx5_1".
export YASGD_NUMA_NODES="${YASGD_NUMA_NODES:-}"
export YASGD_HCAS="${YASGD_HCAS:-}"
# 1: every rank prints one line with its binding.
export YASGD_BIND_VERBOSE="${YASGD_BIND_VERBOSE:-1}"

# --- the job (read by jobs/lib.sh in the job scripts) ---------------------------
# Ranks per node. Empty: one per GPU (nvidia-smi), or, without GPUs, the slots
# the scheduler gave (lines per host in the host list / Slurm tasks per node).
export YASGD_GPUS_PER_NODE="${YASGD_GPUS_PER_NODE:-}"
# Parent folder of the job run directories (relative to YASGD_HOME).
export YASGD_RUNS="${YASGD_RUNS:-runs}"
# Extra mpirun arguments, split on spaces (e.g. "--mca pml ucx").
export YASGD_MPI_ARGS="${YASGD_MPI_ARGS:-}"
