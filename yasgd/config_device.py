"""The rules of a config that depend on what its ranks compute on, as the commands make
them before any training starts: ``yasgd check-config`` on ``--device`` (``yasgd launch``
through it), ``yasgd jobs render`` for GPUs, and ``yasgd train`` on the device its ranks
will use. :func:`check` is :func:`yasgd.config.check_device` (which the training applies
again on its context) and the rules kept here, out of the modules a training imports: the
benchmark cache keys each run by those modules' source (:mod:`yasgd.bench.runcache`), and
a rule that refuses a config changes nothing in a run that starts.

One of them holds on every device: MXNet 1.9.1's wheels are built without large-tensor
support, so a parameter of :data:`TENSOR_LIMIT` elements or more is refused when it is
allocated ("Size of tensor you are trying to allocate is larger than 2^31 elements"), a
traceback once a rank after the run directory is made. :func:`largest_parameter` is the
largest parameter of yasgd's ResNets in closed form (tests/unit/test_tensor_limit.py checks it
against MXNet's own shape inference), so the rule needs no MXNet."""
from __future__ import annotations

from typing import Tuple

from yasgd import UsageError
from yasgd.config_checks import BASIC_DEPTHS, BOTTLENECK_DEPTHS, model_depth

#: MXNet's bound on a tensor's elements without large-tensor support: it requires
#: ``Size() < (int64_t{1} << 31) - 1``
TENSOR_LIMIT = (1 << 31) - 1

FLOAT16_NEEDS_GPU = ("config key model.dtype=float16 needs GPUs: MXNet has no float16 "
                     "training kernels on the CPU (matrix products, convolutions); use "
                     "model.dtype=float32 on a CPU (check-config --device gpu checks a "
                     "config for GPU ranks)")


def host_device() -> str:
    """``gpu`` where ``nvidia-smi -L`` lists a GPU on this host, else ``cpu``."""
    from yasgd.preflight import listed_gpus
    return "gpu" if listed_gpus() > 0 else "cpu"


def largest_parameter(name: str, width: int, classes: int,
                      in_channels: int) -> Tuple[int, str, str]:
    """(elements, what it is, the config key that sets its size) of the largest parameter
    of :func:`yasgd.model.build`'s network: the classifier (classes x the last stage's
    channels), the widest 3x3 convolution or the stem. The ImageNet ResNets' stages are
    64-512 (basic blocks) or 256-2048 channels (bottlenecks, whose 3x3 has a quarter);
    the small ResNets' are width, 2 x width, 4 x width."""
    depth = model_depth(name)
    if depth in BOTTLENECK_DEPTHS or depth in BASIC_DEPTHS:
        last = 2048 if depth in BOTTLENECK_DEPTHS else 512
        conv, stem, key = 9 * 512 * 512, 49 * in_channels * 64, "model.name"
    else:
        last, conv, stem, key = 4 * width, 9 * (4 * width) ** 2, 9 * in_channels * width, \
            "model.width"
    return max((classes * last, f"the classifier's weight ({classes} classes x {last} "
                                "features)", "model.classes"),
               (conv, "the widest 3x3 convolution's weight", key),
               (stem, "the stem's weight", key))


def check_tensors(cfg) -> None:
    """UsageError where a parameter of the model ``cfg`` asks for would have
    :data:`TENSOR_LIMIT` elements or more (the input's channels: Fashion-MNIST's 1, else
    3, as the loaders give them)."""
    m = cfg.model
    size, what, key = largest_parameter(m.name, m.width, m.classes,
                                        1 if cfg.data.kind == "fashion_mnist" else 3)
    if size >= TENSOR_LIMIT:
        value = getattr(m, key.split(".")[1])
        raise UsageError(f"config key {key}={value}: {what} would have {size:,} elements; "
                         f"MXNet (built without large-tensor support) allocates no tensor "
                         f"of {TENSOR_LIMIT:,} or more")


def check(cfg, device: str) -> None:
    """UsageError where ``cfg`` cannot train on ``device``."""
    from yasgd import config
    config.check_device(cfg, device)
    if device == "cpu" and cfg.model.dtype == "float16":
        raise UsageError(FLOAT16_NEEDS_GPU)
    check_tensors(cfg)


def check_training(cfg) -> None:
    """:func:`check` on the device ``yasgd train``'s ranks will use (MXNet's GPUs, as
    :meth:`yasgd.dist.World.context` chooses). MXNet is imported only where a rule asks for
    the device (float16), so a config refused for another reason never loads it."""
    if cfg.model.dtype != "float16":
        check_tensors(cfg)      # the device's rules (config.check_device) run in training
        return
    from yasgd.dist import World
    check(cfg, World().context().device_type)
