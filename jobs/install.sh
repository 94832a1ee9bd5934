#!/usr/bin/env bash
# Build the yasgd environment from nothing, idempotently.
#   jobs/install.sh [--dry-run] [VENV]   (VENV defaults to .venv, relative to the
#                                        repository root); `make install` calls it,
#                                        `make install DRY_RUN=1` with --dry-run.
# It lives in jobs/ because on a cluster it is run once on the login node.
# --dry-run prints the plan (lines "[install] plan: ...") and changes nothing: the
# system packages or prerequisite checks, the pip requirements with the chosen
# MXNet, whether Horovod is (re)built and why, its build flags and the checks.
# Environment knobs (MXNET is set by the Makefile):
#   MXNET    the MXNet distribution to install (default mxnet==1.9.1, CPU; a GPU
#            cluster uses mxnet-cu110==1.9.1, newer GPUs mxnet-cu112 / mxnet-cu117)
#   PYTHON   the interpreter to build the venv with (default python3)
#   CUDA_HOME / HOROVOD_CUDA_HOME, NCCL_HOME / HOROVOD_NCCL_HOME
#            where CUDA (bin/nvcc) and NCCL (include/nccl.h) are, for a CUDA MXNet;
#            found in PATH, CPATH and the usual places when unset (the clusters'
#            `module load cuda nccl` set them: jobs/modules.sh names the modules)
# As root on Debian the system packages come from apt-get; elsewhere (another
# distribution, a cluster's login node, not root) the script checks the build
# prerequisites itself and names each one that is missing.
# A CUDA MXNet gets a Horovod with NCCL (HOROVOD_GPU_OPERATIONS=NCCL). Horovod is
# rebuilt when MXNET changes: $VENV/.yasgd-horovod records what it was built against.
# A second run checks every step and changes nothing.
set -euo pipefail

say() { printf '[install] %s\n' "$*"; }
plan() { printf '[install] plan: %s\n' "$*"; }
die() { printf '[install] error: %s\n' "$*" >&2; exit 1; }

DRY_RUN=0
VENV=""
for arg in "$@"; do
  case $arg in
    --dry-run) DRY_RUN=1 ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    -*) printf '[install] error: unknown option %s (usage: jobs/install.sh [--dry-run] [VENV])\n' "$arg" >&2
        exit 2 ;;
    *) [ -z "$VENV" ] || { printf '[install] error: one VENV only, got %s and %s\n' "$VENV" "$arg" >&2; exit 2; }
       VENV=$arg ;;
  esac
done
VENV=${VENV:-.venv}
MXNET=${MXNET:-mxnet==1.9.1}
PYTHON=${PYTHON:-python3}
HOROVOD=horovod==0.28.1
HERE=$(cd "$(dirname "$0")/.." && pwd)
cd "$HERE"
# shellcheck source=jobs/modules.sh disable=SC1091
. "$HERE/jobs/modules.sh"

# ---- 0. which MXNet: its distribution name, and CUDA or not ------------------
# MXNET is a requirement (name==version, as pip takes it) or a wheel file / URL.
case $MXNET in
  *.whl) MX_NAME=${MXNET##*/}; MX_NAME=${MX_NAME%%-*} ;;
  *) MX_NAME=${MXNET%%[<>=!~;[ @]*} ;;
esac
MX_NAME=${MX_NAME,,}
MX_NAME=${MX_NAME//[_.]/-}
# What Horovod is built against, as the stamp writes it: name==version when pinned.
if [[ $MXNET =~ ^[A-Za-z0-9._-]+==([^=[:space:]]+)$ ]]; then
  MX_WANT="$MX_NAME==${BASH_REMATCH[1]}"
else
  MX_WANT=$MXNET
fi
CUDA_BUILD=0
CUDA_VERSION=""
if [[ $MX_NAME =~ ^mxnet-cu([0-9]+)([0-9])$ ]]; then   # mxnet-cu110 -> CUDA 11.0
  CUDA_BUILD=1
  CUDA_VERSION="${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"
fi
[[ $MX_NAME == mxnet || $MX_NAME == mxnet-* ]] \
  || die "MXNET=$MXNET is not an MXNet distribution (mxnet==1.9.1, mxnet-cu110==1.9.1, ...)"

# ---- 1. system packages, or the prerequisite checks --------------------------
# openssh-server + iproute2 (ip netns, veth) + util-linux (unshare): the two-node
# cluster of tests/cluster (docs/cluster.md, "A two-node rehearsal"); the tests start
# their own sshd inside their namespaces, never the package's in this host.
APT_PKGS=(g++ make cmake git libopenmpi-dev openmpi-bin dataset-fashion-mnist
          libgl1 libglib2.0-0 shellcheck slurm-wlm munge
          openssh-server openssh-client iproute2 util-linux)
APT_ROUTE=0
if command -v dpkg-query >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then APT_ROUTE=1; else WHY_NO_APT="not root"; fi
else
  WHY_NO_APT="no dpkg/apt-get (not Debian)"
fi

apt_install() {
  local missing=("$@")
  say "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # No package may start a daemon here (openssh-server would start an sshd in this
  # host's own namespace, slurm/munge theirs): invoke-rc.d and deb-systemd-invoke
  # ask /usr/sbin/policy-rc.d, and 101 means "not allowed". A policy-rc.d already
  # there is kept and put back afterwards.
  policy=/usr/sbin/policy-rc.d
  saved=""
  if [ -e "$policy" ]; then saved=$(mktemp); cp -p "$policy" "$saved"; fi
  restore_policy() {
    if [ -n "$saved" ]; then mv -f "$saved" "$policy"; else rm -f "$policy"; fi
  }
  trap restore_policy EXIT
  printf '#!/bin/sh\n# jobs/install.sh: no service starts during the install\nexit 101\n' > "$policy"
  chmod 755 "$policy"
  sshd_before=" $( (pgrep -x sshd || true) | tr '\n' ' ')"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  restore_policy
  trap - EXIT
  # The check: no sshd was started by the install (one that ran before is left alone).
  for pid in $(pgrep -x sshd || true); do
    case "$sshd_before" in
      *" $pid "*) ;;
      *) die "an sshd (pid $pid) started during the install; stop it (kill $pid)" ;;
    esac
  done
}

# The build prerequisites, found without installing anything. Each find_* sets
# FOUND (a path, empty when missing) and LOOKED (where it looked).
first_cmd() {
  local c
  for c in "$@"; do
    [ -n "$c" ] || continue
    if command -v "$c" >/dev/null 2>&1; then command -v "$c"; return 0; fi
  done
  return 1
}
find_tool() {   # find_tool NAME CANDIDATE...
  shift
  LOOKED="PATH ($*)"
  FOUND=$(first_cmd "$@") || FOUND=""
}
# CUDA: HOROVOD_CUDA_HOME (Horovod's own variable), CUDA_HOME, CUDA_PATH (set by the
# clusters' cuda modules), else the toolkit of the nvcc in PATH (links resolved).
# CUDA_WARN: a note when the toolkit's CUDA differs from the MXNet wheel's.
find_cuda() {
  local d nvcc release
  nvcc=$(command -v nvcc 2>/dev/null || true)
  [ -z "$nvcc" ] || nvcc=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
  LOOKED="\$HOROVOD_CUDA_HOME/bin, \$CUDA_HOME/bin, \$CUDA_PATH/bin, PATH"
  FOUND=""
  CUDA_WARN=""
  for d in "${HOROVOD_CUDA_HOME:-}" "${CUDA_HOME:-}" "${CUDA_PATH:-}" "$nvcc"; do
    if [ -n "$d" ] && [ -x "$d/bin/nvcc" ]; then FOUND=$d; break; fi
  done
  [ -n "$FOUND" ] || return 0
  if [ ! -f "$FOUND/include/cuda_runtime.h" ]; then
    CUDA_WARN="no CUDA headers in $FOUND/include (a wrapper nvcc?): set CUDA_HOME to the toolkit"
  fi
  release=$("$FOUND/bin/nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p' | head -n 1)
  if [ -n "$release" ] && [ "${release%%.*}" != "${CUDA_VERSION%%.*}" ]; then
    CUDA_WARN="${CUDA_WARN:+$CUDA_WARN; }nvcc is CUDA $release, $MX_NAME is built for CUDA $CUDA_VERSION: load a CUDA ${CUDA_VERSION%%.*}.x module"
  fi
}
# NCCL: nccl.h in HOROVOD_NCCL_INCLUDE, HOROVOD_NCCL_HOME/include, NCCL_HOME/include,
# the CPATH-style search paths a module sets, CUDA's include, the system's.
# NCCL_DIR: the NCCL home to hand to Horovod (empty: the compiler's default paths).
find_nccl() {
  local d dirs=() paths
  paths="${CPATH:-}:${C_INCLUDE_PATH:-}:${CPLUS_INCLUDE_PATH:-}"
  dirs+=("${HOROVOD_NCCL_INCLUDE:-}")
  [ -z "${HOROVOD_NCCL_HOME:-}" ] || dirs+=("$HOROVOD_NCCL_HOME/include")
  [ -z "${NCCL_HOME:-}" ] || dirs+=("$NCCL_HOME/include")
  IFS=: read -r -a more <<< "$paths"
  dirs+=("${more[@]}")
  [ -z "$CUDA_DIR" ] || dirs+=("$CUDA_DIR/include")
  dirs+=(/usr/include /usr/local/include /usr/local/cuda/include)
  LOOKED="\$HOROVOD_NCCL_INCLUDE, \$HOROVOD_NCCL_HOME/include, \$NCCL_HOME/include, CPATH, CUDA's include, /usr/include, /usr/local/include"
  FOUND=""
  NCCL_DIR=""
  for d in "${dirs[@]}"; do
    if [ -n "$d" ] && [ -f "$d/nccl.h" ]; then
      FOUND="$d/nccl.h"
      case $d in
        "${HOROVOD_NCCL_INCLUDE:-/nonexistent}") NCCL_DIR="${HOROVOD_NCCL_HOME:-}" ;;
        /usr/include|/usr/local/include) NCCL_DIR="" ;;
        */include) NCCL_DIR=${d%/include} ;;
      esac
      return 0
    fi
  done
}

# check LABEL: record one prerequisite (FOUND/LOOKED from the last find_*).
MISSING=()
MISSING_LINES=()
CHECK_LINES=()
check() {
  if [ -n "$FOUND" ]; then
    CHECK_LINES+=("$1: $FOUND")
  else
    MISSING+=("$1")
    MISSING_LINES+=("missing $1 (looked in $LOOKED)")
    CHECK_LINES+=("$1: MISSING (looked in $LOOKED)")
  fi
}

APT_MISSING=()
if command -v dpkg-query >/dev/null 2>&1; then
  for p in "${APT_PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep "install ok installed" >/dev/null || APT_MISSING+=("$p")
  done
fi
if [ "$APT_ROUTE" = 0 ]; then
  # The Debian packages g++ make cmake libopenmpi-dev openmpi-bin provide these.
  find_tool c++ "${CXX:-}" g++ c++ clang++; check "C++ compiler (g++)"
  find_tool cmake "${HOROVOD_CMAKE:-}" cmake; check cmake
  find_tool make make; check make
  find_tool mpicc mpicc; check mpicc
  find_tool mpirun mpirun; check mpirun
fi
CUDA_DIR=""
NCCL_DIR=""
if [ "$CUDA_BUILD" = 1 ]; then
  # No Debian package gives the CUDA toolkit and NCCL of the cluster: checked always.
  find_cuda; check nvcc; CUDA_DIR=$FOUND
  [ -z "$FOUND" ] || CHECK_LINES[-1]="nvcc: $FOUND/bin/nvcc${CUDA_WARN:+ (warning: $CUDA_WARN)}"
  find_nccl; check nccl.h
fi

# ---- the Horovod build: flags and checks ---------------------------------------
HVD_ENV=(HOROVOD_WITH_MXNET=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1
         HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1 "MAKEFLAGS=-j$(nproc)")
CHECK_FW=(MXNet MPI Gloo)
GPU_OPS=none
if [ "$CUDA_BUILD" = 1 ]; then
  # Horovod 0.28.1's CMake: HOROVOD_GPU_OPERATIONS=NCCL turns on every GPU collective
  # through NCCL; HOROVOD_CUDA_HOME picks nvcc; cmake/Modules/FindNCCL.cmake reads
  # HOROVOD_NCCL_HOME (or HOROVOD_NCCL_INCLUDE / HOROVOD_NCCL_LIB) and links libnccl.so
  # when HOROVOD_NCCL_LINK=SHARED (the static libnccl_static.a otherwise).
  GPU_OPS=NCCL
  HVD_ENV+=(HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_NCCL_LINK=SHARED
            "HOROVOD_CUDA_HOME=${CUDA_DIR:-<missing: nvcc>}")
  if [ -n "$NCCL_DIR" ]; then
    HVD_ENV+=("HOROVOD_NCCL_HOME=$NCCL_DIR")
  elif [ -z "$FOUND" ]; then
    HVD_ENV+=("HOROVOD_NCCL_HOME=<missing: nccl.h>")
  fi
  [ -z "${HOROVOD_NCCL_INCLUDE:-}" ] || HVD_ENV+=("HOROVOD_NCCL_INCLUDE=$HOROVOD_NCCL_INCLUDE")
  [ -z "${HOROVOD_NCCL_LIB:-}" ] || HVD_ENV+=("HOROVOD_NCCL_LIB=$HOROVOD_NCCL_LIB")
  CHECK_FW+=(NCCL)
fi
HVD_WANT="mxnet=$MX_WANT gpu_operations=$GPU_OPS"

# ---- what the venv holds now (read only) -----------------------------------------
# The installed mxnet* distributions, Horovod's version and whether its MXNet
# extension is there, read from the package metadata without importing either.
PROBE='
import glob, importlib.metadata as md, importlib.util as iu, os, re
seen = set()
for d in md.distributions():
    n = re.sub(r"[-_.]+", "-", d.metadata["Name"] or "").lower()
    if (n == "mxnet" or n.startswith("mxnet-") or n == "horovod") and n not in seen:
        seen.add(n)
        print("dist", n, d.version)
s = iu.find_spec("horovod")
locs = (s.submodule_search_locations or []) if s else []
libs = [p for loc in locs for p in glob.glob(os.path.join(loc, "mxnet", "mpi_lib*.so"))]
print("horovod-mxnet-lib", "yes" if libs else "no")
'
HAVE_MX=()          # name==version of each installed mxnet* distribution
HAVE_HVD=""         # installed Horovod version
HAVE_HVD_LIB=no     # Horovod's MXNet extension library present
probe_venv() {
  HAVE_MX=(); HAVE_HVD=""; HAVE_HVD_LIB=no
  [ -x "$VENV_ABS/bin/python" ] || return 0
  local kind name ver
  while read -r kind name ver; do
    case $kind in
      dist) if [ "$name" = horovod ]; then HAVE_HVD=$ver; else HAVE_MX+=("$name==$ver"); fi ;;
      horovod-mxnet-lib) HAVE_HVD_LIB=$name ;;
    esac
  done < <("$VENV_ABS/bin/python" -I -c "$PROBE" 2>/dev/null || true)
}

# Horovod is (re)built when it is absent, another version, built against another
# MXNet, or with other GPU operations. A venv from before the stamp existed holds a
# Horovod that this script built against the MXNet installed there, without NCCL.
horovod_decision() {
  local stamp="$VENV_ABS/.yasgd-horovod" have
  HVD_HAVE=""
  HVD_REASON=""
  HVD_SOURCE="stamp $stamp"
  if [ -f "$stamp" ]; then
    HVD_HAVE=$(cat "$stamp")
  elif [ "$HAVE_HVD_LIB" = yes ]; then
    HVD_SOURCE="no stamp yet: the installed MXNet"
    if [ ${#HAVE_MX[@]} -eq 1 ]; then
      HVD_HAVE="mxnet=${HAVE_MX[0]} gpu_operations=none"
    else
      HVD_HAVE="mxnet=unknown:$(IFS=,; echo "${HAVE_MX[*]:-none}") gpu_operations=none"
    fi
  fi
  have=${HVD_HAVE#mxnet=}; have=${have%% *}
  if [ -z "$HAVE_HVD" ] || [ "$HAVE_HVD_LIB" != yes ]; then
    HVD_REASON="absent"
  elif [ "$HAVE_HVD" != "${HOROVOD#*==}" ]; then
    HVD_REASON="horovod $HAVE_HVD installed, want ${HOROVOD#*==}"
  elif [ "$have" != "$MX_WANT" ]; then
    HVD_REASON="built against $have, now $MX_WANT"
  elif [ "${HVD_HAVE##*gpu_operations=}" != "$GPU_OPS" ]; then
    if [ "$GPU_OPS" = NCCL ]; then HVD_REASON="built without NCCL"
    else HVD_REASON="built with ${HVD_HAVE##*gpu_operations=} GPU operations, now a CPU MXNet"; fi
  fi
}

# The other MXNet distributions: mxnet and mxnet-cuXXX all own the mxnet/ package
# directory, so exactly one may be installed; the others are uninstalled first.
mxnet_others() {
  MX_OTHERS=()
  MX_PRESENT=0
  local d
  for d in "${HAVE_MX[@]}"; do
    if [ "${d%%==*}" = "$MX_NAME" ]; then MX_PRESENT=1; else MX_OTHERS+=("${d%%==*}"); fi
  done
}

# Pinned Python stack, so that every install runs the same code: numpy < 1.24 for mxnet 1.9.1;
# gluoncv's unpinned dependencies pinned to versions that accept numpy 1.23.5.
REQS=(numpy==1.23.5 "$MXNET" wheel setuptools pyyaml==6.0.2 mpi4py==4.1.2
      opencv-python==4.11.0.86 scipy==1.15.3 pandas==2.3.3 matplotlib==3.10.9
      contourpy==1.3.2 gluoncv==0.10.5.post0 pytest==8.3.4 pytest-xdist==3.6.1 execnet==2.1.2
      mlperf-logging==4.1.68 tqdm==4.67.1 Pillow==11.0.0)
want="$(printf '%s\n' "${REQS[@]}" "$HOROVOD" | sha1sum | cut -c1-12)"
case $VENV in /*) VENV_ABS=$VENV ;; *) VENV_ABS="$HERE/$VENV" ;; esac

# ---- the dry run: the plan, nothing changed ----------------------------------------
if [ "$DRY_RUN" = 1 ]; then
  plan "dry run: nothing is installed or changed"
  if [ "$CUDA_BUILD" = 1 ]; then
    plan "mxnet: $MXNET (CUDA $CUDA_VERSION build: Horovod with NCCL)"
  else
    plan "mxnet: $MXNET (CPU build: Horovod without GPU operations)"
  fi
  if [ -x "$VENV_ABS/bin/python" ]; then plan "venv: $VENV_ABS (exists)"
  else plan "venv: $VENV_ABS (to be created with $PYTHON -m venv)"; fi
  if [ "$APT_ROUTE" = 1 ]; then
    if [ ${#APT_MISSING[@]} -gt 0 ]; then
      plan "system packages: apt-get install ${APT_MISSING[*]}"
    else
      plan "system packages: none to install (all ${#APT_PKGS[@]} Debian packages present)"
    fi
  else
    plan "system packages: none installed ($WHY_NO_APT): checking the build prerequisites instead"
    [ ${#APT_MISSING[@]} -eq 0 ] || plan "note: Debian packages the tests use, not installed: ${APT_MISSING[*]}"
  fi
  for line in "${CHECK_LINES[@]}"; do plan "check: $line"; done
  probe_venv
  mxnet_others
  if [ "$(cat "$VENV_ABS/.yasgd-reqs" 2>/dev/null)" = "$want" ] && [ "$MX_PRESENT" = 1 ]; then
    plan "pip: pinned stack up to date (stamp $want), nothing to install"
  else
    plan "pip: install ${REQS[*]}"
  fi
  if [ ${#MX_OTHERS[@]} -gt 0 ]; then
    plan "mxnet: uninstall ${MX_OTHERS[*]} first, keep one MXNet: $MX_NAME" \
      "(all mxnet* distributions own the mxnet/ package directory)"
  else
    plan "mxnet: one MXNet distribution kept: $MX_NAME"
  fi
  horovod_decision
  if [ -n "$HVD_REASON" ]; then
    [ "$HVD_REASON" = absent ] && verb=build || verb=rebuild
    plan "horovod: $verb $HOROVOD: $HVD_REASON"
  else
    plan "horovod: keep horovod $HAVE_HVD, nothing rebuilt: built with $HVD_HAVE ($HVD_SOURCE)"
  fi
  plan "horovod build: ${HVD_ENV[*]} pip install --no-build-isolation --no-cache-dir $HOROVOD"
  plan "horovod stamp: $VENV_ABS/.yasgd-horovod = $HVD_WANT"
  plan "yasgd: pip install -e . unless installed from this checkout; python -m yasgd.ops.build"
  plan "check: horovodrun --check-build requires: ${CHECK_FW[*]}"
  if [ ${#MISSING[@]} -gt 0 ]; then
    for line in "${MISSING_LINES[@]}"; do plan "error: $line"; done
    yasgd_module_hints "[install] plan: hint:"
    plan "blocked: the install would stop here (missing: ${MISSING[*]}), before changing anything"
  fi
  exit 0
fi

# ---- the prerequisites: every missing one named, then stop ------------------------
if [ ${#MISSING[@]} -gt 0 ]; then
  for line in "${MISSING_LINES[@]}"; do printf '[install] error: %s\n' "$line" >&2; done
  yasgd_module_hints "[install] hint:" >&2
  say "load these modules (jobs/modules.sh; check them with 'module avail') or set" \
    "CUDA_HOME / NCCL_HOME, then run again" >&2
  exit 1
fi
[ -z "${CUDA_WARN:-}" ] || say "warning: $CUDA_WARN" >&2
if [ ${#APT_MISSING[@]} -gt 0 ]; then
  if [ "$APT_ROUTE" = 1 ]; then
    apt_install "${APT_MISSING[@]}"
  else
    say "note: Debian packages the tests use, not installed ($WHY_NO_APT): ${APT_MISSING[*]}" \
      "(as root: apt-get install ${APT_MISSING[*]})"
  fi
fi

# ---- 2. the virtual environment --------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
VENV=$(cd "$VENV" && pwd)
VENV_ABS=$VENV
PY="$VENV/bin/python"
PIP=("$PY" -m pip install -q --disable-pip-version-check)
probe_venv
horovod_decision   # before pip changes the MXNet that Horovod was built against
mxnet_others

# One MXNet: the other mxnet* distributions out first. Their uninstall removes the
# shared mxnet/ files, so an already installed $MX_NAME is then installed again.
stamp="$VENV/.yasgd-reqs"
if [ ${#MX_OTHERS[@]} -gt 0 ]; then
  say "pip uninstall ${MX_OTHERS[*]} (keeping one MXNet: $MX_NAME)"
  "$PY" -m pip uninstall -q -y --disable-pip-version-check "${MX_OTHERS[@]}"
  if [ "$MX_PRESENT" = 1 ]; then
    "${PIP[@]}" --force-reinstall --no-deps "$MXNET"
  fi
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || [ "$MX_PRESENT" = 0 ]; then
  say "pip install the pinned stack"
  "${PIP[@]}" --upgrade pip >/dev/null
  "${PIP[@]}" "${REQS[@]}"
fi

# ---- 3. Horovod, built against this MXNet with MPI + Gloo (+ NCCL) --------------
if [ -z "$HVD_REASON" ] && ! "$PY" -c "import horovod.mxnet" 2>/dev/null; then
  HVD_REASON="horovod.mxnet does not import"
fi
if [ -n "$HVD_REASON" ]; then
  extra=()
  # an installed Horovod is rebuilt in place (its dependencies stay as they are)
  [ -z "$HAVE_HVD" ] || extra=(--force-reinstall --no-deps)
  say "building $HOROVOD with MXNet + MPI + Gloo${CUDA_DIR:+ + NCCL} ($HVD_REASON; about 2 minutes)"
  say "horovod build: ${HVD_ENV[*]}"
  env "${HVD_ENV[@]}" "${PIP[@]}" --no-build-isolation --no-cache-dir "${extra[@]}" "$HOROVOD"
fi
echo "$want" > "$stamp"

# ---- 4. yasgd itself (editable) and its operator library -------------------
# (checked from / so that the checkout's own yasgd/ folder cannot stand in for the install)
if [ ! -x "$VENV/bin/yasgd" ] || ! (cd / && "$PY" -c \
    "import yasgd, sys; sys.exit(0 if yasgd.__file__.startswith('$HERE/') else 1)") 2>/dev/null; then
  say "pip install -e ."
  "${PIP[@]}" --no-build-isolation --no-deps -e .
fi
"$PY" -m yasgd.ops.build --quiet || die "building the operator library failed"

# ---- 5. check the build ------------------------------------------------------
check=$("$VENV/bin/horovodrun" --check-build 2>&1)
for fw in "${CHECK_FW[@]}"; do
  echo "$check" | grep "\[X\] $fw" >/dev/null || { echo "$check" >&2; die "Horovod was built without $fw"; }
done
# what Horovod is built against, read by the next run (horovod_decision)
[ "$(cat "$VENV/.yasgd-horovod" 2>/dev/null)" = "$HVD_WANT" ] || echo "$HVD_WANT" > "$VENV/.yasgd-horovod"
say "ok: $("$PY" -c 'import mxnet, horovod, numpy; print("mxnet", mxnet.__version__, "horovod", horovod.__version__, "numpy", numpy.__version__)')"
