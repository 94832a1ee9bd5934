#!/bin/bash
#PBS -N yasgd
#PBS -q rt_HF
#PBS -l select=1:mpiprocs=8
#PBS -l walltime=1:00:00
#PBS -P GROUP
#PBS -j oe
#PBS -S /bin/bash
# yasgd on ABCI 3.0 (PBS Professional; rt_HF = one full node, 8 x H200):
# one MPI rank per GPU, bound to its GPU, NUMA node and HCA (jobs/bind.sh).
# Submit from the repository root:
#   qsub -P GROUP -l select=N:mpiprocs=8 jobs/abci/pbs/train.sh
#   YASGD_CONFIG=examples/configs/paper.yaml YASGD_ARGS="train.epochs=90" qsub -V ...
# or render a ready script: yasgd jobs render --scheduler pbs --nodes N --group GROUP
#   --config CONFIG -o job.sh && qsub job.sh
# The run directory (YASGD_RUNS/NAME-pbs-JOBID/) holds config.yaml,
# provenance.json, pip-freeze.txt, the host list, the job log and the
# training's own run directory. The job's exit status is mpirun's.
# Variables: jobs/common.sh (tuning) and jobs/lib.sh (the job).
set -euo pipefail

# >>> yasgd jobs render: defaults, each overridable from the environment
YASGD_HOME="${YASGD_HOME:-${PBS_O_WORKDIR:-$PWD}}"
YASGD_CONFIG="${YASGD_CONFIG:-examples/configs/paper.yaml}"
YASGD_RENDERED_ARGS=()
# <<< yasgd jobs render
[ -f "$YASGD_HOME/jobs/lib.sh" ] || {
  printf '[yasgd-job] error: YASGD_HOME=%s is not the yasgd repository (no jobs/lib.sh): submit from it or set YASGD_HOME\n' "$YASGD_HOME" >&2
  exit 2
}
YASGD_HOME=$(cd "$YASGD_HOME" && pwd)   # absolute: the job changes directory

cd "${PBS_O_WORKDIR:-$PWD}"
# ABCI 3.0 software stack, versions pinned in one place (jobs/modules.sh): HPC-X (OpenMPI +
# UCX), CUDA, cuDNN, NCCL.
# shellcheck source=jobs/modules.sh
. "$YASGD_HOME/jobs/modules.sh"
YASGD_MODULES="${YASGD_MODULES-$YASGD_MODULES_ABCI3}"
# shellcheck source=jobs/common.sh
. "$YASGD_HOME/jobs/common.sh"
# shellcheck source=jobs/lib.sh
. "$YASGD_HOME/jobs/lib.sh"

yasgd_load_modules
# $PBS_NODEFILE lists each node once per MPI process (mpiprocs).
yasgd_job pbs "${PBS_JOBID:-local-$$}" "${PBS_NODEFILE:-}" "$@"
