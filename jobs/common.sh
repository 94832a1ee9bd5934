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

# --- host kind --------------------------------------------------------------------
# gpu when nvidia-smi lists a GPU here, else cpu; the settings below differ by it
# (docs/cluster.md, "Horovod and MXNet settings per host kind"). Set it to force one.
# grep reads the whole list (not -q): one that quits at the first match can leave
# nvidia-smi writing into a closed pipe, and under pipefail its SIGPIPE reads as no GPU.
if [ -z "${YASGD_HOST_KIND:-}" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep '^GPU ' >/dev/null; then
    YASGD_HOST_KIND=gpu
  else
    YASGD_HOST_KIND=cpu
  fi
fi
case "$YASGD_HOST_KIND" in      # any other value would silently get the cpu settings
  cpu|gpu) ;;
  *) printf '[yasgd-job] error: YASGD_HOST_KIND must be cpu or gpu, got %q\n' "$YASGD_HOST_KIND" >&2
     exit 2 ;;
esac
export YASGD_HOST_KIND

# --- Horovod -------------------------------------------------------------------
# yasgd issues one grouped allreduce per static layer group (yasgd/allreduce.py).
if [ "$YASGD_HOST_KIND" = gpu ]; then
  # One group = one NCCL call: Horovod fuses the tensors of each group separately
  # and never merges two groups into one buffer (controller.cc, group table), so
  # the static groups stay the messages the paper describes.
  export HOROVOD_DISABLE_GROUP_FUSION="${HOROVOD_DISABLE_GROUP_FUSION:-1}"
  # The fusion buffer must hold the largest group whole, or Horovod splits it into
  # several calls: every tensor padded to 16 bytes (batched device copies), the sum
  # at most this threshold. 64 MiB, NVIDIA's MLPerf v0.6 multi-node value, holds
  # ResNet-50's largest group at the default budget with room for larger budgets;
  # tests/e2e/test_preflight.py checks it against the real groups, and the trainer
  # warns when a config's groups outgrow it (yasgd.preflight.fusion_guard).
  export HOROVOD_FUSION_THRESHOLD="${HOROVOD_FUSION_THRESHOLD:-67108864}"
  # Pad and copy tensors into the fusion buffer with one batched kernel (Horovod's
  # default; the padding above assumes it).
  export HOROVOD_BATCH_D2D_MEMCOPIES="${HOROVOD_BATCH_D2D_MEMCOPIES:-1}"
  # Background-thread cycle (ms): 0.2 as in Fujitsu's and NVIDIA's MLPerf v0.6 runs;
  # on a GPU node the polling thread has a core of its own.
  export HOROVOD_CYCLE_TIME="${HOROVOD_CYCLE_TIME:-0.2}"
else
  # On CPU hosts Horovod's fusion buffer only adds a copy to a group's allreduce: off
  # (`make bench-allreduce` compares this with Horovod's trainer under its defaults).
  export HOROVOD_FUSION_THRESHOLD="${HOROVOD_FUSION_THRESHOLD:-0}"
  # Every core computes here, and a 0.2 ms poll steals a good part of one, which
  # slowed training down markedly against a 5 ms cycle.
  export HOROVOD_CYCLE_TIME="${HOROVOD_CYCLE_TIME:-5}"
fi
# Response cache entries; ResNet-50 has ~160-190 gradient tensors.
export HOROVOD_CACHE_CAPACITY="${HOROVOD_CACHE_CAPACITY:-1024}"
# Horovod's two-level allreduce stays off, on every host kind: NCCL's own allreduce
# already runs rings and trees across the nodes over InfiniBand (GPUDirect), while
# Horovod's hierarchical mode (NCCL inside a node) sends the inter-node step
# through host memory and MPI. Fujitsu's 2-stage allreduce was their own Horovod
# patch, not this mode. Without NCCL Horovod ignores it.
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
if [ "$YASGD_HOST_KIND" = gpu ]; then
  # cuDNN autotune: each convolution shape is timed once, at its first use, and its
  # fastest algorithm kept; ResNet-50 has few distinct shapes, so it pays back in
  # the first steps. (NVIDIA's v0.6 scripts had it off because they chose the
  # algorithms themselves, with patched operators.)
  export MXNET_CUDNN_AUTOTUNE_DEFAULT="${MXNET_CUDNN_AUTOTUNE_DEFAULT:-1}"
  # One worker and one copy thread per GPU (MXNet's defaults: two each): the engine
  # then issues each GPU's work in priority order on one stream, so the groups'
  # allreduces start in backward order (NVIDIA's and Fujitsu's v0.6 runs).
  export MXNET_GPU_WORKER_NTHREADS="${MXNET_GPU_WORKER_NTHREADS:-1}"
  export MXNET_GPU_COPY_NTHREADS="${MXNET_GPU_COPY_NTHREADS:-1}"
  # Bulk execution of the hybridized graph: forward in as few engine operations as
  # possible, backward in runs of 25 nodes, so that each layer group's gradients are
  # released to its allreduce soon after they are written (NVIDIA's v0.6 multi-node
  # runs).
  export MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_FWD="${MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_FWD:-999}"
  export MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_BWD="${MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_BWD:-25}"
  # Gradient accumulation by add-to in backward (NVIDIA's and Fujitsu's v0.6 runs).
  # Read by NVIDIA's MXNet containers; the PyPI mxnet 1.9.1 does not read it.
  export MXNET_EXEC_ENABLE_ADDTO="${MXNET_EXEC_ENABLE_ADDTO:-1}"
else
  # No convolution is tuned on a CPU host: autotune is a cuDNN setting.
  export MXNET_CUDNN_AUTOTUNE_DEFAULT="${MXNET_CUDNN_AUTOTUNE_DEFAULT:-0}"
fi
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
# 1: every rank runs `yasgd preflight` (GPUs, MXNet kernels, one Horovod
# allreduce) with the training's launcher line before the training; 0: skip it.
export YASGD_PREFLIGHT="${YASGD_PREFLIGHT:-1}"
# Seconds a rank may take for the preflight before it ends the job.
export YASGD_PREFLIGHT_TIMEOUT="${YASGD_PREFLIGHT_TIMEOUT:-120}"
# Extra mpirun arguments, split on spaces (e.g. "--mca pml ucx").
export YASGD_MPI_ARGS="${YASGD_MPI_ARGS:-}"
