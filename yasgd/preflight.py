"""Preflight: every rank checks its node before a job spends its allocation on training.

``yasgd preflight`` runs on every rank, started by the job's own launcher line just before
the training (jobs/lib.sh). Each rank checks, in seconds:

* on a GPU host (``nvidia-smi -L`` lists GPUs): that MXNet sees the GPUs this rank may use
  (``mx.context.num_gpus()`` against nvidia-smi and ``CUDA_VISIBLE_DEVICES``) and runs a small
  convolution on its own GPU (``mx.gpu(local_rank)``); a failure names the GPU's compute
  capability and the MXNet wheels with kernels for it (:mod:`yasgd.wheelarch`, when present);
  and that Horovod was built with NCCL (``hvd.nccl_built()``): without it, GPU gradients would
  be reduced through host memory;
* on a CPU host: a small convolution on the CPU;
* everywhere: one Horovod allreduce over all ranks, of ``rank + 1`` (on the rank's GPU on GPU
  hosts, so through NCCL), checked against ``n (n + 1) / 2``.

Rank 0 prints one line, ``[preflight] ok: ...``. A failed check is one ``yasgd: error:
preflight: ...`` line and exit status :data:`EXIT_STATUS` (an environment error, not a usage
error); a rank that does not finish within the timeout ends the job the same way (through
``MPI_Abort`` where MPI runs: :func:`yasgd.watchdog.abort_job`), instead of hanging.

:func:`fusion_guard` is the run-time check of the Horovod settings of GPU hosts
(``HOROVOD_DISABLE_GROUP_FUSION=1`` with ``HOROVOD_FUSION_THRESHOLD`` at least the largest
padded group, jobs/common.sh): the trainer calls it with its groups.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from typing import List, Optional, Sequence

from yasgd.envcheck import launcher_count

EXIT_STATUS = 3                 # an environment error: the node, the build or the network
DEFAULT_TIMEOUT_S = 120.0
#: Horovod pads every tensor of a fused GPU allreduce to this many bytes
#: (BATCHED_D2D_PADDING, horovod/common/ops/cuda/cuda_kernels.h; controller.cc FuseResponses).
HOROVOD_TENSOR_PADDING = 16
#: Horovod's fusion threshold when HOROVOD_FUSION_THRESHOLD is not set (operations.cc).
HOROVOD_DEFAULT_THRESHOLD = 128 * 1024 * 1024
GPU_INSTALL_HINT = "make install MXNET=mxnet-cu110==1.9.1"


class PreflightError(Exception):
    """A check failed: the message is the one line the user sees."""


# -- the node ----------------------------------------------------------------------------
def _smi(*args: str) -> Optional[List[str]]:
    """Lines of ``nvidia-smi ARGS``, or None where there is no working nvidia-smi."""
    try:
        out = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.splitlines() if out.returncode == 0 else None


def listed_gpus() -> int:
    """GPUs ``nvidia-smi -L`` lists on this host (0: none, or no nvidia-smi)."""
    return sum(1 for line in _smi("-L") or [] if line.startswith("GPU "))


def visible_devices(listed: int) -> List[str]:
    """The GPUs this process may use: CUDA_VISIBLE_DEVICES's entries where it is set (up to
    the first invalid one, as CUDA reads it), else every listed GPU by index."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return [str(i) for i in range(listed)]
    out = []
    for entry in (e.strip() for e in value.split(",")):
        if not entry or entry.startswith("-"):
            break
        out.append(entry)
    return out[:listed]


def compute_capability(device: str) -> Optional[str]:
    """The compute capability ("7.0", "9.0") of GPU ``device`` (an index or UUID) per nvidia-smi."""
    lines = _smi("--query-gpu=compute_cap", "--format=csv,noheader", "-i", device)
    caps = [line.strip() for line in lines or [] if line.strip()]
    return caps[0] if caps else None


def _wheelarch():
    try:
        from yasgd import wheelarch   # the table of MXNet's CUDA wheels and their kernels
        return wheelarch
    except ImportError:
        return None


def wheel_hint(cc: Optional[str]) -> str:
    """The GPU's compute capability and the MXNet wheels with kernels for it."""
    if not cc:
        return "compute capability unknown (nvidia-smi --query-gpu=compute_cap gave none)"
    try:
        return _wheelarch().describe(cc)            # names the capability itself
    except (AttributeError, LookupError, ValueError, OSError):
        return f"compute capability {cc}"


def install_hint(cc: Optional[str]) -> str:
    """The install command of a CUDA build of MXNet for capability ``cc``: the first wheel
    with kernels for it, or :data:`GPU_INSTALL_HINT` where the table cannot tell."""
    try:
        wheels = _wheelarch().wheels_for(cc) if cc else None
    except (AttributeError, LookupError, ValueError, OSError):
        wheels = None
    if wheels is None:
        return GPU_INSTALL_HINT
    return f"make install MXNET={wheels[0]}" if wheels else "no MXNet 1.9.1 wheel runs on it"


# -- the checks ----------------------------------------------------------------------------
def _conv_ok(ctx) -> None:
    """A 3x3 convolution of ones (27 everywhere) on ``ctx``, read back (a sync point)."""
    import mxnet as mx
    import numpy as np
    x = mx.nd.ones((1, 3, 8, 8), ctx=ctx)
    w = mx.nd.ones((4, 3, 3, 3), ctx=ctx)
    y = mx.nd.Convolution(x, w, kernel=(3, 3), num_filter=4, no_bias=True).asnumpy()
    if not np.allclose(y, 27.0):
        raise PreflightError(f"a 3x3 convolution on {ctx} gave {float(y.flat[0])}, not 27")


def check_device(local_rank: int):
    """This rank's MXNet context after the device checks; a one-line PreflightError else."""
    import mxnet as mx
    listed = listed_gpus()
    if listed == 0:
        _conv_ok(mx.cpu())
        return mx.cpu(), None
    visible = visible_devices(listed)
    seen = mx.context.num_gpus()
    device = visible[local_rank % len(visible)] if visible else str(local_rank % listed)
    cc = compute_capability(device)
    if seen == 0 or seen < len(visible):
        cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
        what = "" if cvd is None else f" ({len(visible)} in CUDA_VISIBLE_DEVICES={cvd})"
        why = ("the installed mxnet is a CPU build or cannot load CUDA: install a CUDA build "
               f"({install_hint(cc)})") if seen == 0 else "check CUDA_VISIBLE_DEVICES"
        raise PreflightError(f"GPU mismatch: nvidia-smi lists {listed} GPU(s){what} but MXNet "
                             f"{mx.__version__} sees {seen}: {why}; {wheel_hint(cc)}")
    ctx = mx.gpu(local_rank % seen)
    try:
        _conv_ok(ctx)
    except PreflightError:
        raise
    except Exception as e:  # noqa: BLE001 -- MXNetError: no kernel image, driver too old, ...
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise PreflightError(f"MXNet {mx.__version__} cannot run a kernel on GPU {device} "
                             f"({first}); {wheel_hint(cc)}") from None
    return ctx, cc


def check_allreduce(world, ctx, cc: Optional[str] = None) -> str:
    """One allreduce of rank + 1 over all ranks; returns the transport's name."""
    import mxnet as mx
    import horovod.mxnet as hvd
    gpu = ctx.device_type == "gpu"
    if gpu and not hvd.nccl_built():
        raise PreflightError("Horovod was built without NCCL, so GPU gradients would be reduced "
                             f"through host memory: rebuild it with `{install_hint(cc)}` on a "
                             "node with CUDA and NCCL (module load ...)")
    n = world.size
    total = hvd.allreduce(mx.nd.array([world.rank + 1.0], ctx=ctx), average=False,
                          name="yasgd.preflight").asnumpy()   # sync point
    if float(total[0]) != n * (n + 1) / 2:
        raise PreflightError(f"allreduce of rank + 1 over {n} ranks gave {float(total[0])}, "
                             f"not {n * (n + 1) // 2}")
    if gpu:
        code = int(hvd.nccl_built())   # NCCL_VERSION_CODE: X*1000+Y*100+Z, X*10000+Y*100+Z
        major, minor = divmod(code // 100, 100) if code >= 10000 else divmod(code // 100, 10)
        return f"NCCL {major}.{minor}" if code > 1 else "NCCL"
    return "Gloo" if hvd.gloo_enabled() and not hvd.mpi_enabled() else "MPI"


# -- the command ----------------------------------------------------------------------------
def _env_rank(kind: str = "RANK") -> int:
    """This process's rank (kind "RANK") or local rank ("LOCAL_RANK") as the launcher set it
    (mpirun, horovodrun), before Horovod starts; 0 without a launcher."""
    names = [f"OMPI_COMM_WORLD_{kind}", f"HOROVOD_{kind}"] + (["PMIX_RANK"] if kind == "RANK"
                                                             else [])
    return next((n for n in map(launcher_count, names) if n is not None), 0)


def _who(rank: int) -> str:
    return f"rank {rank} on {socket.gethostname()}"


def run(timeout_s: float = DEFAULT_TIMEOUT_S) -> str:
    """Every check on this rank; returns rank 0's summary line ('' on other ranks)."""
    from yasgd import dist, watchdog
    t0 = time.monotonic()
    state = {"stage": "importing MXNet", "rank": _env_rank()}

    def expire() -> None:
        sys.stderr.write(f"yasgd: error: preflight: {_who(state['rank'])} did not finish "
                         f"within {timeout_s:g} s (while {state['stage']}); ending the job "
                         f"(exit status {EXIT_STATUS})\n")
        sys.stderr.flush()
        watchdog.abort_job(EXIT_STATUS)

    timer = threading.Timer(timeout_s, expire)
    timer.daemon = True
    timer.start()
    try:
        state["stage"] = "checking the device"
        ctx, cc = check_device(_env_rank("LOCAL_RANK"))
        state["stage"] = "starting Horovod"
        world = dist.world(force_horovod=True)
        state["rank"] = world.rank
        state["stage"] = "in the allreduce over all ranks"
        transport = check_allreduce(world, ctx, cc)
    finally:
        timer.cancel()
    if world.rank != 0:
        return ""
    import horovod.mxnet as hvd
    hosts = max(1, hvd.cross_size()) if world.size > 1 else 1
    device = "cpu" if ctx.device_type == "cpu" else f"gpu (compute capability {cc or '?'})"
    return (f"[preflight] ok: {world.size} rank(s) on {hosts} host(s), {device}, allreduce "
            f"over {transport}, {time.monotonic() - t0:.1f} s")


def main(timeout_s: float = DEFAULT_TIMEOUT_S) -> int:
    """``yasgd preflight``: 0 when every check passed, :data:`EXIT_STATUS` otherwise."""
    try:
        line = run(timeout_s=timeout_s)
    except PreflightError as e:
        from yasgd import dist
        world = dist.current()
        sys.stderr.write(f"yasgd: error: preflight: "
                         f"{_who(world.rank if world else _env_rank())}: {e}\n")
        return EXIT_STATUS
    if line:
        print(line, flush=True)
    return 0


# -- the Horovod settings of GPU hosts, checked at run time ----------------------------------
def padded_group_bytes(group: Sequence) -> int:
    """Bytes a group takes in Horovod's fusion buffer: each tensor (a Gluon parameter, an
    NDArray or a byte count) rounded up to :data:`HOROVOD_TENSOR_PADDING` bytes."""
    from yasgd.grouping import tensor_bytes
    pad = HOROVOD_TENSOR_PADDING
    return sum((tensor_bytes(t) + pad - 1) // pad * pad for t in group)


def largest_padded_group(groups: Sequence[Sequence]) -> int:
    """The largest :func:`padded_group_bytes` of ``groups`` (0 for none)."""
    return max((padded_group_bytes(g) for g in groups), default=0)


def _env_int(env, name: str) -> Optional[int]:
    try:
        return int(env.get(name, "").strip())
    except ValueError:
        return None


def fusion_guard(groups: Sequence[Sequence], env=None) -> Optional[str]:
    """A warning when group fusion is off (``HOROVOD_DISABLE_GROUP_FUSION=1``) but
    ``HOROVOD_FUSION_THRESHOLD`` is below the largest padded group, so that Horovod would
    split that group into several allreduces; None otherwise. ``groups``: the trainer's
    groups (lists of Gluon parameters, NDArrays or byte counts); ``env``: default os.environ."""
    env = os.environ if env is None else env
    if (_env_int(env, "HOROVOD_DISABLE_GROUP_FUSION") or 0) <= 0:
        return None
    threshold = _env_int(env, "HOROVOD_FUSION_THRESHOLD")
    if threshold is None:
        threshold = HOROVOD_DEFAULT_THRESHOLD
    need = largest_padded_group(groups)
    if threshold >= need:
        return None
    return (f"HOROVOD_FUSION_THRESHOLD={threshold} is below the largest allreduce group "
            f"({need} bytes with Horovod's padding) while HOROVOD_DISABLE_GROUP_FUSION=1: Horovod "
            f"splits that group into several allreduces; set HOROVOD_FUSION_THRESHOLD to at "
            f"least {need} (jobs/common.sh)")
