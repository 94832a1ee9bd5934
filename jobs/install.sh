#!/usr/bin/env bash
# Build the yasgd environment from nothing, idempotently.
#   jobs/install.sh [VENV]        (VENV defaults to .venv); `make install` calls it.
# It lives in jobs/ because on a cluster it is run once on the login node.
# Environment knobs (set by the Makefile):
#   MXNET    the MXNet distribution to install (default mxnet==1.9.1; a GPU
#            cluster uses e.g. MXNET=mxnet-cu110==1.9.1)
#   PYTHON   the interpreter to build the venv with (default python3)
# A second run checks every step and changes nothing.
set -euo pipefail

VENV=${1:-.venv}
MXNET=${MXNET:-mxnet==1.9.1}
PYTHON=${PYTHON:-python3}
HOROVOD=horovod==0.28.1
HERE=$(cd "$(dirname "$0")/.." && pwd)
cd "$HERE"

say() { printf '[install] %s\n' "$*"; }
die() { printf '[install] error: %s\n' "$*" >&2; exit 1; }

# ---- 1. system packages ---------------------------------------------------
# openssh-server + iproute2 (ip netns, veth) + util-linux (unshare): the two-node
# cluster of tests/cluster (docs/cluster.md, "A two-node rehearsal"); the tests start
# their own sshd inside their namespaces, never the package's in this host.
APT_PKGS=(g++ make cmake git libopenmpi-dev openmpi-bin dataset-fashion-mnist
          libgl1 libglib2.0-0 shellcheck slurm-wlm munge
          openssh-server openssh-client iproute2 util-linux)
missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
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
  else
    die "missing system packages: ${missing[*]} (as root: apt-get install ${missing[*]})"
  fi
fi

# ---- 2. the virtual environment --------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
VENV=$(cd "$VENV" && pwd)
PY="$VENV/bin/python"
PIP=("$PY" -m pip install -q --disable-pip-version-check)

# Pinned Python stack, so that every install runs the same code: numpy < 1.24 for mxnet 1.9.1;
# gluoncv's unpinned dependencies pinned to versions that accept numpy 1.23.5.
REQS=(numpy==1.23.5 "$MXNET" wheel setuptools pyyaml==6.0.2 mpi4py==4.1.2
      opencv-python==4.11.0.86 scipy==1.15.3 pandas==2.3.3 matplotlib==3.10.9
      contourpy==1.3.2 gluoncv==0.10.5.post0 pytest==8.3.4 mlperf-logging==4.1.68
      tqdm==4.67.1 Pillow==11.0.0)
stamp="$VENV/.yasgd-reqs"
want="$(printf '%s\n' "${REQS[@]}" "$HOROVOD" | sha1sum | cut -c1-12)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "pip install the pinned stack"
  "${PIP[@]}" --upgrade pip >/dev/null
  "${PIP[@]}" "${REQS[@]}"
fi

# ---- 3. Horovod, built against this MXNet with MPI + Gloo --------------------
if ! "$PY" -c "import horovod.mxnet" 2>/dev/null; then
  say "building $HOROVOD with MXNet + MPI + Gloo (about 2 minutes)"
  HOROVOD_WITH_MXNET=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 \
  HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1 MAKEFLAGS="-j$(nproc)" \
    "${PIP[@]}" --no-build-isolation --no-cache-dir "$HOROVOD"
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
for fw in MXNet MPI Gloo; do
  echo "$check" | grep -q "\[X\] $fw" || { echo "$check" >&2; die "Horovod was built without $fw"; }
done
say "ok: $("$PY" -c 'import mxnet, horovod, numpy; print("mxnet", mxnet.__version__, "horovod", horovod.__version__, "numpy", numpy.__version__)')"
