#!/usr/bin/env bash
# shellcheck shell=bash
# What every yasgd job script shares (PBS, UGE, Slurm): modules, the host list
# and the rank count, the run directory with its provenance (written before MPI
# starts), and the mpirun line. Sourced by the job scripts, which set first:
#   YASGD_HOME           the repository; the job runs there
#   YASGD_CONFIG         the YAML config (relative to YASGD_HOME, or absolute)
#   YASGD_RENDERED_ARGS  config overrides filled in by `yasgd jobs render` (array;
#                        each element one override, passed on exactly as it is)
#   YASGD_MODULES        environment modules of the cluster (`module load`)
# and then call `yasgd_job SCHEDULER JOB_ID HOST_LIST [section.key=value ...]`.
# Besides jobs/common.sh, a user may set:
#   YASGD_ARGS       more config overrides, section.key=value, split on spaces
#                    (and tabs, newlines); nothing in them is expanded: no `$`,
#                    quotes, backslashes or globs, a `*` reaches the training as `*`
#   YASGD_NAME       prefix of the run directory (default: the config's file name)
#   YASGD_PYTHON     the interpreter (default: YASGD_HOME/.venv/bin/python, else python3)
#   YASGD_TRAIN_CMD  what each rank runs instead of `YASGD_PYTHON -m yasgd.cli train`
#                    (split as YASGD_ARGS; it receives the config and the overrides)
#   YASGD_LAUNCHER   who starts the ranks: srun | mpirun | auto (default auto: srun
#                    inside a Slurm job of more than one node when its srun has an MPI
#                    plugin this OpenMPI speaks, PMIx or else PMI-2; mpirun otherwise)
#   YASGD_SRUN_MPI   srun's --mpi plugin (default: pmix or pmi2, as found)
#   YASGD_SRUN_ARGS  extra srun arguments, split as YASGD_ARGS
#   YASGD_PREFLIGHT  1 (default): every rank runs `yasgd preflight` before the training,
#                    with the training's launcher line; 0: skip it (any other value is refused)
#   YASGD_PREFLIGHT_TIMEOUT  seconds a rank may take for the preflight (default 120)
# Values are passed on as array elements and never evaluated again: no eval, no
# unquoted expansion; job.txt and command.sh hold them %q-quoted, one per word.

yasgd_log() { printf '[yasgd-job] %s\n' "$*" >&2; }
yasgd_die() { yasgd_log "error: $*"; exit 2; }

# yasgd_split TEXT: the words of TEXT, split on blanks, into the array
# YASGD_WORDS. `read -r -a` splits on IFS only: it expands no globs, no `$` and
# no quotes, and -r keeps backslashes; -d '' reads every line, not the first.
yasgd_split() {
  YASGD_WORDS=()
  IFS=$' \t\n' read -r -d '' -a YASGD_WORDS <<< "$1" || true
}

# Load YASGD_MODULES when the cluster has environment modules; a machine without
# a `module` command (a laptop, CI) runs with the environment it has.
yasgd_load_modules() {
  if ! command -v module >/dev/null 2>&1 && [ -f /etc/profile.d/modules.sh ]; then
    set +u
    # shellcheck source=/dev/null
    . /etc/profile.d/modules.sh
    set -u
  fi
  if ! command -v module >/dev/null 2>&1; then
    yasgd_log "no 'module' command: not loading '${YASGD_MODULES:-}'"
    return 0
  fi
  [ -n "${YASGD_MODULES:-}" ] || return 0
  local mods=()
  yasgd_split "$YASGD_MODULES"
  mods=("${YASGD_WORDS[@]}")
  set +u
  module load "${mods[@]}" || yasgd_die "module load ${mods[*]} failed"
  set -u
  yasgd_log "loaded modules: ${mods[*]}"
}

# GPUs per node: YASGD_GPUS_PER_NODE when set, else what nvidia-smi lists here
# (the first node of the job; the nodes of a job are alike), else 0.
yasgd_gpus_per_node() {
  if [ -n "${YASGD_GPUS_PER_NODE:-}" ]; then
    [[ $YASGD_GPUS_PER_NODE =~ ^[0-9]{1,4}$ ]] \
      || yasgd_die "YASGD_GPUS_PER_NODE must be a number 0-9999, got '$YASGD_GPUS_PER_NODE'"
    echo "$YASGD_GPUS_PER_NODE"
  elif command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true
  else
    echo 0
  fi
}

# yasgd_slurm_hostlist OUT: the nodes of this Slurm job, each written once per
# task it holds ($SLURM_TASKS_PER_NODE, e.g. "8(x3),4"). Each count is read by a
# pattern before any arithmetic, which would evaluate what else the value held.
yasgd_slurm_hostlist() {
  local out=$1 spec counts=() hosts=() specs=() i j n shown
  IFS=, read -r -a specs <<< "${SLURM_TASKS_PER_NODE:-1}"
  for spec in "${specs[@]}"; do
    if ! [[ $spec =~ ^([1-9][0-9]{0,5})(\(x([1-9][0-9]{0,5})\))?$ ]]; then
      printf -v shown '%q' "$SLURM_TASKS_PER_NODE"
      yasgd_die "SLURM_TASKS_PER_NODE=$shown: each entry must be a task count N or N(xM)"
    fi
    for ((i = 0; i < ${BASH_REMATCH[3]:-1}; i++)); do counts+=("${BASH_REMATCH[1]}"); done
  done
  mapfile -t hosts < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
  : > "$out"
  for i in "${!hosts[@]}"; do
    n=${counts[i]:-1}
    for ((j = 0; j < n; j++)); do echo "${hosts[i]}" >> "$out"; done
  done
}

# yasgd_hostfile WHAT LIST RANKS_PER_NODE: an OpenMPI hostfile, on stdout, from a
# host list (one host per line, repeated once per slot as in $PBS_NODEFILE; further
# columns, blank lines and # comments ignored). Each host gets RANKS_PER_NODE slots
# when that is > 0 (one rank per GPU), else as many slots as it has lines. A line
# whose first word is no host name (letters, digits, '.', '_', '-'), or no host at
# all, stops the job naming WHAT (the scheduler's file).
yasgd_hostfile() {
  local what=$1 list=$2 ppn=$3 out
  out=$(LC_ALL=C awk -v ppn="$ppn" 'NF && $1 !~ /^#/ {
      if ($1 !~ /^[A-Za-z0-9][A-Za-z0-9._-]*$/) {   # shown with what cannot be printed as ?
        bad = $1; gsub(/[^!-~]/, "?", bad); print "!line " FNR " is not a host name: " bad
        failed = 1; exit }
      if (!($1 in n)) order[++k] = $1; n[$1]++ }
    END { if (!failed) for (i = 1; i <= k; i++)
            print order[i] " slots=" (ppn > 0 ? ppn : n[order[i]]) }' "$list")
  case $out in
    "!"*) yasgd_die "host list $what: ${out#!}" ;;    # (no host name starts with !)
    "") yasgd_die "host list $what holds no host" ;;
  esac
  printf '%s\n' "$out"
}

# yasgd_world HOSTFILE_TEXT: sets YASGD_NNODES and YASGD_NP from yasgd_hostfile's output.
yasgd_world() {
  YASGD_NNODES=$(printf '%s\n' "$1" | wc -l)
  YASGD_NP=$(printf '%s\n' "$1" | awk -F'slots=' '{ s += $2 } END { print s + 0 }')
}

# yasgd_srun_mpi: the srun --mpi plugin that this srun and this OpenMPI share, pmix
# (preferred) or pmi2, or nothing. YASGD_SRUN_MPI wins. OpenMPI speaks PMIx through
# a pmix component other than its own "isolated"/"flux" ones (ext3x, pmix3x, ...)
# and PMI-2 through "s2"; an MPI without ompi_info (MPICH, Intel MPI) is not guessed.
yasgd_srun_mpi() {
  if [ -n "${YASGD_SRUN_MPI:-}" ]; then echo "$YASGD_SRUN_MPI"; return 0; fi
  command -v srun >/dev/null 2>&1 && command -v ompi_info >/dev/null 2>&1 || return 0
  local plugins ompi
  # (22.05 prints "MPI plugin types are..." and one plugin a line; older ones "srun: pmix")
  plugins=" $(srun --mpi=list 2>&1 | sed 's/^srun: *//; s/^[[:space:]]*//' | tr '\n' ' ') "
  ompi=" $(ompi_info 2>/dev/null | awk '$1 == "MCA" && $2 == "pmix:" { print $3 }' | tr '\n' ' ') "
  if [[ $plugins == *" pmix "* ]] && [[ $ompi =~ \ (ext[0-9]x|pmix[0-9]x)\  ]]; then
    echo pmix
  elif [[ $plugins == *" pmi2 "* ]] && [[ $ompi == *" s2 "* ]]; then
    echo pmi2
  fi
}

# yasgd_launcher NNODES: sets YASGD_LAUNCHER_USED (srun or mpirun) and, for srun,
# YASGD_SRUN_PLUGIN. One node: mpirun forks every rank itself; across nodes Slurm's
# own srun starts them (its accounting, signals and --kill-on-bad-exit).
yasgd_launcher() {
  local nnodes=$1 want=${YASGD_LAUNCHER:-auto}
  YASGD_SRUN_PLUGIN=""
  case $want in
    mpirun) YASGD_LAUNCHER_USED=mpirun ;;
    srun)
      [ -n "${SLURM_JOB_ID:-}" ] || yasgd_die "YASGD_LAUNCHER=srun outside a Slurm job"
      YASGD_SRUN_PLUGIN=$(yasgd_srun_mpi)
      [ -n "$YASGD_SRUN_PLUGIN" ] || yasgd_die "YASGD_LAUNCHER=srun: srun --mpi=list offers" \
        "no plugin this MPI speaks (pmix, pmi2); set YASGD_SRUN_MPI or YASGD_LAUNCHER=mpirun"
      YASGD_LAUNCHER_USED=srun ;;
    auto)
      YASGD_LAUNCHER_USED=mpirun
      if [ -n "${SLURM_JOB_ID:-}" ] && [ "$nnodes" -gt 1 ]; then
        YASGD_SRUN_PLUGIN=$(yasgd_srun_mpi)
        [ -z "$YASGD_SRUN_PLUGIN" ] || YASGD_LAUNCHER_USED=srun
      fi ;;
  esac      # (any other value: refused by yasgd_job before anything is made)
}

# A new run directory under YASGD_RUNS (never reuses one).
yasgd_new_run_dir() {
  local base=$1 dir i=1
  mkdir -p "$YASGD_RUNS" || yasgd_die "cannot create $YASGD_RUNS"
  dir="$(cd "$YASGD_RUNS" && pwd)/$base"
  while ! mkdir "$dir" 2>/dev/null; do
    [ -d "$dir" ] || yasgd_die "cannot create run directory $dir"
    i=$((i + 1))
    dir="$(cd "$YASGD_RUNS" && pwd)/$base.$i"
  done
  printf '%s\n' "$dir"
}

# yasgd_job SCHEDULER JOB_ID HOST_LIST [section.key=value ...]
# Writes the run directory, then runs one rank per GPU (per slot without GPUs)
# through mpirun or srun (yasgd_launcher); returns the launcher's exit status.
yasgd_job() {
  local sched=$1 jobid=$2 hostlist=$3
  shift 3
  cd "$YASGD_HOME" || yasgd_die "YASGD_HOME=$YASGD_HOME is not a directory"
  [ -f "$YASGD_HOME/jobs/bind.sh" ] || yasgd_die "YASGD_HOME=$YASGD_HOME is not the yasgd repository"
  export YASGD_HOME
  export PYTHONPATH="$YASGD_HOME${PYTHONPATH:+:$PYTHONPATH}"
  local py=${YASGD_PYTHON:-}
  if [ -z "$py" ]; then
    if [ -x "$YASGD_HOME/.venv/bin/python" ]; then py=$YASGD_HOME/.venv/bin/python; else py=python3; fi
  fi
  command -v "$py" >/dev/null 2>&1 || yasgd_die "python interpreter '$py' not found (set YASGD_PYTHON)"
  [ -f "$YASGD_CONFIG" ] || yasgd_die "config $YASGD_CONFIG not found (from $YASGD_HOME)"
  # What the job was given, before anything is made (not once a rank after MPI starts): the
  # scheduler's host list (a job across nodes must not run on one host without a word),
  # the launcher and the preflight's settings.
  if [ -n "$hostlist" ] && [ ! -f "$hostlist" ]; then
    yasgd_die "host list $hostlist (from the scheduler) is not a file"
  fi
  case "${YASGD_LAUNCHER:-auto}" in
    srun|mpirun|auto) ;;
    *) yasgd_die "YASGD_LAUNCHER must be srun, mpirun or auto, got '$YASGD_LAUNCHER'" ;;
  esac
  case "${YASGD_PREFLIGHT:-1}" in
    0|1) ;;
    *) yasgd_die "YASGD_PREFLIGHT must be 1 (run the preflight) or 0 (skip it), got '$YASGD_PREFLIGHT'" ;;
  esac
  local flag   # jobs/bind.sh reads these on every rank, after MPI starts
  for flag in YASGD_BIND YASGD_BIND_CUDA_VISIBLE YASGD_BIND_VERBOSE; do
    case "${!flag:-1}" in
      0|1) ;;
      *) yasgd_die "$flag must be 1 or 0, got '${!flag}'" ;;
    esac
  done
  local why   # the interpreter has yasgd and what its checks import; preflight --timeout's
  why=$("$py" -c 'import argparse, sys
import yasgd.config
from yasgd import argtypes
try:
    argtypes.seconds()(sys.argv[1])
except argparse.ArgumentTypeError as e:
    print(e)' "${YASGD_PREFLIGHT_TIMEOUT:-120}" 2>/dev/null) \
    || yasgd_die "'$py' cannot import yasgd and the packages it needs (set YASGD_PYTHON to" \
                 "the python of its venv, $YASGD_HOME/.venv/bin/python after make install)"
  [ -z "$why" ] || yasgd_die "YASGD_PREFLIGHT_TIMEOUT $why"

  # Overrides: rendered ones, then YASGD_ARGS, then the script's arguments;
  # run.dir is the job's run directory, always.
  local env_args=() args=() arg shown
  yasgd_split "${YASGD_ARGS:-}"
  env_args=("${YASGD_WORDS[@]}")
  args=("${YASGD_RENDERED_ARGS[@]}" "${env_args[@]}" "$@")
  for arg in "${args[@]}"; do     # an option (--help) would reach check-config and train
    printf -v shown '%q' "$arg"
    [[ $arg != -* ]] || yasgd_die "$shown is not a section.key=value override (the job's" \
                                  "arguments and YASGD_ARGS hold overrides only)"
  done

  # Ranks: one per GPU; without GPUs, one per slot the scheduler gave. The host list
  # and the launcher are checked before the run directory is made.
  local gpus name run_dir hosts
  gpus=$(yasgd_gpus_per_node)
  if [ -n "$hostlist" ]; then
    hosts=$(yasgd_hostfile "$hostlist" "$hostlist" "$gpus") || exit 2
  else
    yasgd_log "no host list from the scheduler: running on $(hostname) alone"
    hosts=$(yasgd_hostfile "of this host" <(hostname) "$gpus") || exit 2
  fi
  yasgd_world "$hosts"
  yasgd_launcher "$YASGD_NNODES"
  local launcher=$YASGD_LAUNCHER_USED
  if [ "$launcher" = mpirun ]; then
    command -v mpirun >/dev/null 2>&1 || yasgd_die "mpirun not found (module load hpcx / openmpi?)"
  fi
  name=${YASGD_NAME:-$(basename "${YASGD_CONFIG%.*}")}
  # The run directory's name keeps [A-Za-z0-9._+-] only; the run.dir override
  # quotes the whole path for YAML (a ' #' or ': ' in YASGD_RUNS stays the path's).
  name=${name//[^A-Za-z0-9._+-]/_}
  run_dir=$(yasgd_new_run_dir "$name-$sched-${jobid//\//_}")
  if [ -n "$hostlist" ]; then
    cp "$hostlist" "$run_dir/hostlist.orig"
  else
    hostname > "$run_dir/hostlist.orig"
  fi
  printf '%s\n' "$hosts" > "$run_dir/hostfile"
  args+=("run.dir='${run_dir//\'/\'\'}'")
  yasgd_log "$sched job $jobid: $YASGD_NNODES node(s), $YASGD_NP rank(s), GPUs/node: $gpus, run directory: $run_dir"

  # Provenance, before MPI starts: resolved config (validated for this world
  # size), environment + versions + git revision + hosts, package list, job.
  local status=0
  "$py" -m yasgd.cli check-config "$YASGD_CONFIG" "${args[@]}" --world-size "$YASGD_NP" \
    > "$run_dir/config.yaml" || status=$?
  if [ "$status" -ne 0 ]; then
    echo "$status" > "$run_dir/exit_status"
    rm -f "$run_dir/config.yaml"      # no resolved config: the job never ran one
    yasgd_log "error: config $YASGD_CONFIG ${args[*]} is refused for $YASGD_NP ranks (the" \
      "line above says why); run directory: $run_dir"
    return "$status"
  fi
  "$py" -m yasgd.cli provenance "$run_dir" --hostfile "$run_dir/hostfile" > /dev/null \
    || yasgd_die "yasgd provenance failed"
  "$py" -m pip freeze --all > "$run_dir/pip-freeze.txt" 2>/dev/null \
    || yasgd_log "warning: pip freeze failed; $run_dir/pip-freeze.txt is incomplete"
  cp "$0" "$run_dir/job-script" 2>/dev/null || true
  {
    echo "scheduler=$sched"
    echo "job_id=$jobid"
    echo "nodes=$YASGD_NNODES"
    echo "ranks=$YASGD_NP"
    echo "gpus_per_node=$gpus"
    echo "launcher=$launcher${YASGD_SRUN_PLUGIN:+ --mpi=$YASGD_SRUN_PLUGIN}"
    printf 'config=%q\n' "$YASGD_CONFIG"
    printf 'overrides='; printf '%q ' "${args[@]}"; echo
    echo "start_utc=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  } > "$run_dir/job.txt"

  # where a stopped run leaves its marker (exported to every rank below)
  export YASGD_STOP_FILE="$run_dir/stopped"
  rm -f "$YASGD_STOP_FILE"
  local var launch=()
  if [ "$launcher" = srun ]; then
    # srun: Slurm starts one task per rank on the nodes of the host file, each with
    # the job's whole environment; the MPI library wires up through PMIx (or PMI-2).
    # A task that dies or fails ends the step (--kill-on-bad-exit), like mpirun.
    # OMPI_COMM_WORLD_SIZE: the world size mpirun would announce, which the training
    # reads before MPI starts to know it is one of several ranks (yasgd/dist.py; a
    # direct-launched OpenMPI rank sets the same value itself once MPI is up).
    launch=(srun "--mpi=$YASGD_SRUN_PLUGIN" --kill-on-bad-exit=1 --cpu-bind=none
            --nodes="$YASGD_NNODES" --ntasks="$YASGD_NP"
            --export="ALL,OMPI_COMM_WORLD_SIZE=$YASGD_NP")
    if [ "$(awk -F'slots=' '{ print $2 }' "$run_dir/hostfile" | sort -u | wc -l)" -eq 1 ]; then
      launch+=(--ntasks-per-node="$((YASGD_NP / YASGD_NNODES))")
    else  # uneven slots: one line per task, in rank order
      awk -F' slots=' '{ for (i = 0; i < $2; i++) print $1 }' "$run_dir/hostfile" \
        > "$run_dir/srun-hostfile"
      export SLURM_HOSTFILE="$run_dir/srun-hostfile"
      launch+=(--distribution=arbitrary)
    fi
    if [ -z "${OMPI_MCA_btl_vader_single_copy_mechanism:-}" ] && ! "$py" -c \
        'import sys; from yasgd.launch import single_copy_allowed as ok; sys.exit(not ok())'; then
      export OMPI_MCA_btl_vader_single_copy_mechanism=none
    fi
    yasgd_split "${YASGD_SRUN_ARGS:-}"
    launch+=("${YASGD_WORDS[@]}")
  else
    # mpirun: ranks fill each host's slots in order (local ranks 0..n-1 per
    # node); jobs/bind.sh binds each to its GPU, NUMA node and HCA.
    launch=(mpirun -np "$YASGD_NP" --hostfile "$run_dir/hostfile" --bind-to none)
    [ "$(id -u)" -ne 0 ] || launch+=(--allow-run-as-root)
    # OpenMPI's single-copy shared-memory transport (CMA, process_vm_readv) where
    # this host allows it; containers often forbid it, and OpenMPI's large
    # shared-memory transfers then fail: off there (yasgd.launch.single_copy_allowed).
    if [ -z "${OMPI_MCA_btl_vader_single_copy_mechanism:-}" ] && ! "$py" -c \
        'import sys; from yasgd.launch import single_copy_allowed as ok; sys.exit(not ok())'; then
      launch+=(--mca btl_vader_single_copy_mechanism none)
    fi
    yasgd_split "${YASGD_MPI_ARGS:-}"
    launch+=("${YASGD_WORDS[@]}")
    for var in $(compgen -e); do
      case $var in
        OMP_*|KMP_*|MXNET_*|HOROVOD_*|NCCL_*|UCX_*|PYTHON*|YASGD_*|PATH|LD_LIBRARY_PATH) launch+=(-x "$var") ;;
      esac
    done
  fi
  local train=()
  if [ -n "${YASGD_TRAIN_CMD:-}" ]; then
    yasgd_split "$YASGD_TRAIN_CMD"
    train=("${YASGD_WORDS[@]}")
  else
    train=("$py" -m yasgd.cli train)
  fi
  local cmd=("${launch[@]}" bash "$YASGD_HOME/jobs/bind.sh" "${train[@]}" "$YASGD_CONFIG" "${args[@]}")
  printf '%q ' "${cmd[@]}" > "$run_dir/command.sh"
  echo >> "$run_dir/command.sh"

  # Preflight: the same launcher line runs `yasgd preflight` on every rank first (through
  # jobs/bind.sh, so each rank sees its GPU as the training will): MXNet sees the node's
  # GPUs and runs a kernel on its own, Horovod reduces one tensor over all ranks
  # (yasgd/preflight.py). A failed check ends the job here, before the training.
  if [ "${YASGD_PREFLIGHT:-1}" != 0 ]; then
    local check=("${launch[@]}" bash "$YASGD_HOME/jobs/bind.sh" "$py" -m yasgd.cli preflight
                 --timeout "${YASGD_PREFLIGHT_TIMEOUT:-120}")
    yasgd_log "preflight: $(printf '%q ' "${check[@]}")"
    if YASGD_BIND_VERBOSE=0 "${check[@]}" 2>&1 | (trap '' TERM INT; exec tee -a "$run_dir/job.log"); then
      status=0
    else
      status=${PIPESTATUS[0]}
    fi
    if [ "$status" -ne 0 ]; then
      echo "$status" > "$run_dir/exit_status"
      local why="error: preflight failed (exit status $status; the ranks' lines above say why):"
      why+=" the training did not start; run directory: $run_dir"
      yasgd_log "$why"
      printf '[yasgd-job] %s\n' "$why" >> "$run_dir/job.log"
      return "$status"
    fi
  fi

  yasgd_log "starting: $(printf '%q ' "${cmd[@]}")"
  # Signals (a walltime, scancel, qdel, Ctrl-C) reach the ranks, which stop together
  # at one step with a checkpoint and leave $YASGD_STOP_FILE (yasgd/faults.py). This
  # shell's traps run only once the pipeline has ended, so it waits for the launcher; the
  # log's tee ignores the signals, so that no rank loses its output.
  local got_signal=""
  trap 'got_signal=SIGTERM' TERM
  trap 'got_signal=SIGINT' INT
  if "${cmd[@]}" 2>&1 | (trap '' TERM INT; exec tee -a "$run_dir/job.log"); then
    status=0
  else
    status=${PIPESTATUS[0]}
  fi
  trap - TERM INT
  local stopped="" ckpt=""
  if [ -f "$YASGD_STOP_FILE" ]; then
    read -r stopped ckpt < "$YASGD_STOP_FILE" || true
    case $stopped in SIGINT) status=130 ;; *) stopped=SIGTERM; status=143 ;; esac
  fi
  echo "$status" > "$run_dir/exit_status"
  if [ -n "$stopped" ]; then
    # (mpirun, when signalled itself, may drop the ranks' last lines: this one says it all)
    yasgd_log "stopped by $stopped with checkpoint ${ckpt:-?} (exit status $status);" \
      "continue with run.resume=auto; run directory: $run_dir"
  else
    [ -z "$got_signal" ] || yasgd_log "$got_signal received; the job ended before it took effect"
    yasgd_log "$launcher exited with status $status; run directory: $run_dir"
  fi
  return "$status"
}
