#!/bin/bash
#$ -N yasgd
#$ -l rt_F=1
#$ -l h_rt=1:00:00
#$ -j y
#$ -cwd
#$ -S /bin/bash
# yasgd-submit: qsub -g GROUP
# yasgd on the paper's ABCI of 2019 (Univa Grid Engine; rt_F = one full node,
# 4 x V100 SXM2, 2 InfiniBand EDR HCAs): one MPI rank per GPU, bound to its
# GPU, NUMA node and HCA (jobs/bind.sh). Submit from the repository root:
#   qsub -g GROUP -l rt_F=N jobs/abci/uge/train.sh
#   (the paper's run: -l rt_F=512, 2,048 GPUs)
# or render a ready script: yasgd jobs render --scheduler uge --nodes N --group GROUP
#   --config CONFIG -o job.sh && qsub -g GROUP job.sh   (or yasgd jobs submit)
# The run directory (YASGD_RUNS/NAME-uge-JOBID/) holds config.yaml,
# provenance.json, pip-freeze.txt, the host list, the job log and the
# training's own run directory. The job's exit status is mpirun's.
# Variables: jobs/common.sh (tuning) and jobs/lib.sh (the job).
set -euo pipefail

# >>> yasgd jobs render: defaults, each overridable from the environment
YASGD_HOME="${YASGD_HOME:-$PWD}"
YASGD_CONFIG="${YASGD_CONFIG:-examples/configs/paper.yaml}"
YASGD_RENDERED_ARGS=()
# <<< yasgd jobs render
[ -f "$YASGD_HOME/jobs/lib.sh" ] || {
  printf '[yasgd-job] error: YASGD_HOME=%s is not the yasgd repository (no jobs/lib.sh): submit from it or set YASGD_HOME\n' "$YASGD_HOME" >&2
  exit 2
}
YASGD_HOME=$(cd "$YASGD_HOME" && pwd)   # absolute: the job changes directory

# ABCI 2019 software stack (Fujitsu's MLPerf v0.6 scripts loaded these), versions pinned in
# one place (jobs/modules.sh).
# shellcheck source=jobs/modules.sh
. "$YASGD_HOME/jobs/modules.sh"
YASGD_MODULES="${YASGD_MODULES-$YASGD_MODULES_ABCI2019}"

# shellcheck source=jobs/common.sh
. "$YASGD_HOME/jobs/common.sh"
# shellcheck source=jobs/lib.sh
. "$YASGD_HOME/jobs/lib.sh"

yasgd_load_modules
# $SGE_JOB_HOSTLIST lists each node once; with GPUs each gets one rank per GPU
# (4 on ABCI 2019), without GPUs one rank per line.
if [ -n "${NHOSTS:-}" ] && [ -f "${SGE_JOB_HOSTLIST:-}" ] \
   && [ "$NHOSTS" != "$(grep -c . "$SGE_JOB_HOSTLIST")" ]; then
  yasgd_log "warning: NHOSTS=$NHOSTS but $SGE_JOB_HOSTLIST lists $(grep -c . "$SGE_JOB_HOSTLIST") host(s)"
fi
yasgd_job uge "${JOB_ID:-local-$$}" "${SGE_JOB_HOSTLIST:-}" "$@"
