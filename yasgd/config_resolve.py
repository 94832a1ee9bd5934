"""How a run resolves the config keys that depend on the run: ``auto`` values (hybridize,
the stall timeout, fused BN + ReLU) and the rules that depend on the device kind the ranks
compute on. Re-exported by :mod:`yasgd.config`, whose ``Config`` these functions take."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from yasgd import UsageError

if TYPE_CHECKING:
    from yasgd.config import Config

FUSED_BN_RELU_ONLY = ("config key model.fused_bn_relu=true needs MXNet's BatchNormWithReLU, which "
                      "MXNet 1.9.1 has only on the CPU in float32; use auto (BN + ReLU "
                      "elsewhere) or false")
DEVICES = ("cpu", "gpu")


def check_device(cfg: Config, device: str) -> None:
    """The rules that depend on the device kind the ranks compute on (``cpu`` or ``gpu``):
    ``yasgd check-config --device`` before a job, ``yasgd train`` on its context."""
    if device not in DEVICES:
        raise UsageError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
    if device == "gpu" and cfg.model.fused_bn_relu == "true":
        raise UsageError(FUSED_BN_RELU_ONLY + " (the ranks compute on GPUs)")


def fused_bn_relu(cfg: Config, device: str) -> bool:
    """Whether the model fuses BN + ReLU on ``device`` (``model.fused_bn_relu``, resolving auto:
    only where MXNet has the kernel, the CPU in float32)."""
    value = cfg.model.fused_bn_relu
    if value != "auto":
        return value == "true"
    return device == "cpu" and cfg.model.dtype == "float32"


def hybridize(cfg: Config) -> bool:
    """Whether ``yasgd train`` hybridizes the network (``train.hybridize``, resolving auto)."""
    h = cfg.train.hybridize
    if h != "auto":
        return h == "true"
    from yasgd import model
    return model.imagenet_style(cfg.model.name) and not cfg.train.bn_recalibrate_batches


def stall_timeout(cfg: Config) -> Optional[float]:
    """``run.stall_timeout_s``: None for auto (the watchdog decides), else seconds (0 = off)."""
    value = cfg.run.stall_timeout_s
    return None if value == "auto" else float(value)
