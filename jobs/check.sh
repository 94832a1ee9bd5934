#!/usr/bin/env bash
# `make jobs-check`: shellcheck on every script in jobs/ and on the scripts
# `yasgd jobs render` writes for each scheduler (PBS, UGE, Slurm).
#   bash jobs/check.sh            (from anywhere; PYTHON=... picks the interpreter)
# Exit status 0 when every script is clean.
set -euo pipefail

# it takes no arguments: one given is refused rather than ignored
[ "$#" -eq 0 ] || { echo "jobs/check.sh: error: takes no arguments, got: $* (CONFIG=... and PYTHON=... pick the config and the interpreter)" >&2; exit 2; }
cd "$(dirname "$0")/.."
command -v shellcheck >/dev/null 2>&1 || { echo "jobs/check.sh: shellcheck not found (apt-get install shellcheck)" >&2; exit 2; }
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
# The paper preset when it exists, else the tiny test config.
CONFIG=${CONFIG:-examples/configs/paper.yaml}
extra=()
if [ ! -f "$CONFIG" ]; then
  CONFIG=examples/configs/tiny.yaml
  extra=(train.global_batch=81920)   # splits over 2,048 ranks, like the paper's
fi

# -x follows `source` lines; their paths (shellcheck source=jobs/...) are
# relative to the repository root, the working directory here.
mapfile -t scripts < <(find jobs -type f \( -name '*.sh' -o -name '*.sbatch' \) | sort)
status=0
echo "shellcheck: ${scripts[*]}"
shellcheck -x "${scripts[@]}" || status=1

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
render() {
  local name=$1
  shift
  PYTHONPATH=. "$PY" -m yasgd.cli jobs render "$@" -o "$out/$name" || { status=1; return; }
  rendered+=("$out/$name")
}
rendered=()
render pbs.sh --scheduler pbs --nodes 256 --config "$CONFIG" --group gXX00000 "${extra[@]}"
# one 8-GPU node: the per-rank batch follows from the global batch (2,048 / 8; a GPU's
# micro-batch of 81,920 / 8 images is refused: MXNet holds no tensor that large)
render pbs-nogroup.sh --scheduler pbs --nodes 1 --gpus-per-node 8 --config "$CONFIG" --walltime 0:30:00 \
  "${extra[@]}" train.global_batch=2048 train.batch_per_rank=0
render uge.sh --scheduler uge --nodes 512 --config "$CONFIG" --group gXX00000 "${extra[@]}"
render slurm.sbatch --scheduler slurm --nodes 2 --gpus-per-node 4 --config "$CONFIG" \
  --queue gpu --group proj 'run.name=with space' train.epochs=2 train.global_batch=2048 \
  train.batch_per_rank=0 schedule.warmup_epochs=1 data.polish_epochs=1
echo "shellcheck (rendered with $CONFIG): ${rendered[*]##*/}"
[ ${#rendered[@]} -eq 0 ] || shellcheck -x "${rendered[@]}" || status=1
[ "$status" -eq 0 ] && echo "jobs-check: ok" || echo "jobs-check: FAILED" >&2
exit "$status"
