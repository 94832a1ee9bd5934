"""The rules of a config that depend on the device kind its ranks compute on (``cpu`` or
``gpu``), as the commands make them before any training starts: ``yasgd check-config`` on
``--device`` (``yasgd launch`` through it) and ``yasgd train`` on the device its ranks
will use. :func:`check` is :func:`yasgd.config.check_device` (which the training applies
again on its context) and the rules kept here, out of the modules a training imports: the
benchmark cache keys each run by those modules' source (:mod:`yasgd.bench.runcache`), and
a rule that refuses a config changes nothing in a run that starts."""
from __future__ import annotations

from yasgd import UsageError

FLOAT16_NEEDS_GPU = ("config key model.dtype=float16 needs GPUs: MXNet has no float16 "
                     "training kernels on the CPU (matrix products, convolutions); use "
                     "model.dtype=float32 on a CPU (check-config --device gpu checks a "
                     "config for GPU ranks)")


def host_device() -> str:
    """``gpu`` where ``nvidia-smi -L`` lists a GPU on this host, else ``cpu``."""
    from yasgd.preflight import listed_gpus
    return "gpu" if listed_gpus() > 0 else "cpu"


def check(cfg, device: str) -> None:
    """UsageError where ``cfg`` cannot train on ``device``."""
    from yasgd import config
    config.check_device(cfg, device)
    if device == "cpu" and cfg.model.dtype == "float16":
        raise UsageError(FLOAT16_NEEDS_GPU)


def check_training(cfg) -> None:
    """:func:`check` on the device ``yasgd train``'s ranks will use (MXNet's GPUs, as
    :meth:`yasgd.dist.World.context` chooses). MXNet is imported only where a rule asks for
    the device (float16), so a config refused for another reason never loads it."""
    if cfg.model.dtype != "float16":
        return
    from yasgd.dist import World
    check(cfg, World().context().device_type)
