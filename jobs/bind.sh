#!/usr/bin/env bash
# Bind one MPI rank to its GPU, NUMA node and InfiniBand HCA, then exec the
# command (Fujitsu's ABCI scripts do the same with numactl):
#   mpirun ... bash jobs/bind.sh python -m yasgd.cli train CONFIG ...
# Local rank r of L on a node (OMPI_COMM_WORLD_LOCAL_RANK, or Slurm's/MPICH's):
#   GPU       r (yasgd/dist.py uses mx.gpu(local_rank); with
#             YASGD_BIND_CUDA_VISIBLE=1 the rank also sees only that GPU)
#   NUMA node the GPU's (its PCI device in sysfs), else YASGD_NUMA_NODES or the
#             node's NUMA nodes in blocks: entry r*M/L of a list of M
#   HCA       YASGD_HCAS or /sys/class/infiniband, in blocks the same way:
#             NCCL_IB_HCA and UCX_NET_DEVICES, unless already set
# CPU and memory binding needs numactl and more than one NUMA node; without
# them (and with YASGD_BIND=0) the command runs unbound. Variables: jobs/common.sh.
set -euo pipefail

lrank=${OMPI_COMM_WORLD_LOCAL_RANK:-${SLURM_LOCALID:-${MPI_LOCALRANKID:-0}}}
lsize=${OMPI_COMM_WORLD_LOCAL_SIZE:-${SLURM_NTASKS_PER_NODE:-${MPI_LOCALNRANKS:-1}}}
rank=${OMPI_COMM_WORLD_RANK:-${SLURM_PROCID:-${PMI_RANK:-0}}}

[ $# -gt 0 ] || { echo "usage: bind.sh COMMAND [ARGS...]" >&2; exit 2; }
if [ "${YASGD_BIND:-1}" = 0 ]; then
  exec "$@"
fi

# block LIST: entry lrank*M/lsize of a space-separated list of M entries.
block() {
  local items=()
  read -r -a items <<< "$1"
  [ ${#items[@]} -gt 0 ] || return 0
  echo "${items[lrank * ${#items[@]} / lsize]}"
}

# --- GPU ---------------------------------------------------------------------
gpu=-
numa=
if command -v nvidia-smi >/dev/null 2>&1; then
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
  if [ "$ngpu" -gt 0 ]; then
    gpu=$((lrank % ngpu))
    if [ "${YASGD_BIND_CUDA_VISIBLE:-0}" = 1 ]; then
      export CUDA_VISIBLE_DEVICES=$gpu
    fi
    # "00000000:1B:00.0" -> /sys/bus/pci/devices/0000:1b:00.0/numa_node
    bus=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader -i "$gpu" 2>/dev/null || true)
    bus=$(echo "${bus: -12}" | tr '[:upper:]' '[:lower:]')
    if [ -n "$bus" ] && [ -r "/sys/bus/pci/devices/$bus/numa_node" ]; then
      numa=$(cat "/sys/bus/pci/devices/$bus/numa_node")
      [ "$numa" -ge 0 ] 2>/dev/null || numa=
    fi
  fi
fi

# --- NUMA node ---------------------------------------------------------------
nodes=${YASGD_NUMA_NODES:-}
if [ -z "$nodes" ] && [ -d /sys/devices/system/node ]; then
  nodes=$(find /sys/devices/system/node -maxdepth 1 -name 'node[0-9]*' -printf '%f\n' \
            | sed 's/^node//' | sort -n | tr '\n' ' ')
fi
if [ -n "${YASGD_NUMA_NODES:-}" ] || [ -z "$numa" ]; then
  numa=$(block "$nodes")
fi
read -r -a node_list <<< "$nodes"

# --- HCA ---------------------------------------------------------------------
hcas=${YASGD_HCAS:-}
if [ -z "$hcas" ] && [ -d /sys/class/infiniband ]; then
  hcas=$(find /sys/class/infiniband -mindepth 1 -maxdepth 1 -printf '%f\n' | sort | tr '\n' ' ')
fi
hca=$(block "$hcas")
if [ -n "$hca" ]; then
  export NCCL_IB_HCA="${NCCL_IB_HCA:-$hca}"
  export UCX_NET_DEVICES="${UCX_NET_DEVICES:-$hca:1}"
fi

# --- bind and run ---------------------------------------------------------------
launch=("$@")
how="unbound"
if [ -n "$numa" ] && [ ${#node_list[@]} -gt 1 ]; then
  if command -v numactl >/dev/null 2>&1; then
    launch=(numactl "--cpunodebind=$numa" "--membind=$numa" "$@")
    how="numactl node $numa"
  else
    how="unbound (no numactl)"
  fi
fi
if [ "${YASGD_BIND_VERBOSE:-1}" = 1 ]; then
  echo "[bind] rank $rank local $lrank/$lsize on $(hostname): gpu $gpu, numa ${numa:--}, hca ${hca:--}, $how" >&2
fi
exec "${launch[@]}"
