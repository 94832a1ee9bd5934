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
traceback once a rank after the run directory is made. The same bound holds for the
tensors a step computes on a rank's micro-batch (its input, each layer's output and
gradient), which grow with ``data.image_size`` on RecordIO and synthetic data.
:func:`largest_parameter` and :func:`largest_activation` are the largest of yasgd's ResNets
in closed form (tests/unit/test_tensor_limit.py checks both against MXNet's own shape
inference), so the rule needs no MXNet."""
from __future__ import annotations

from typing import Optional, Tuple

from yasgd import UsageError
from yasgd.config_checks import BASIC_DEPTHS, BOTTLENECK_DEPTHS, model_depth

#: MXNet's bound on a tensor's elements without large-tensor support: it requires
#: ``Size() < (int64_t{1} << 31) - 1``
TENSOR_LIMIT = (1 << 31) - 1

NO_LARGE_TENSORS = (f"MXNet (built without large-tensor support) allocates no tensor of "
                    f"{TENSOR_LIMIT:,} or more")

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


def largest_activation(name: str, width: int, stem_stride: int, image: int, in_channels: int,
                       classes: int) -> Tuple[int, str]:
    """(elements, what it is) of the largest tensor one image of ``image`` x ``image`` px
    makes in :func:`yasgd.model.build`'s network: its input, the stem's output, a stage's
    output or the logits, on the convolutions :func:`yasgd.hostmem.conv_outputs` walks. A
    bottleneck's inner tensors (a quarter of its channels, at most at the last stage's
    side) and a block's shortcut are never larger than the stage outputs around them."""
    from yasgd.hostmem import conv_outputs
    last = {stage: (c, s) for c, s, stage in conv_outputs(name, width, stem_stride, image,
                                                          in_channels)}
    found = [(in_channels * image * image, f"the input ({in_channels} x {image} x {image})"),
             (classes, f"the logits ({classes})")]
    for stage, (c, s) in last.items():
        what = "the stem's output" if stage == 0 else f"stage {stage}'s output"
        found.append((c * s * s, f"{what} ({c} x {s} x {s})"))
    return max(found, key=lambda f: f[0])


def check_tensors(cfg, world_size: int = 1) -> None:
    """UsageError where a parameter of the model ``cfg`` asks for, or a tensor of a step on
    a rank's micro-batch at ``world_size`` ranks, would have :data:`TENSOR_LIMIT` elements
    or more (the input's channels: Fashion-MNIST's 1, else 3, as the loaders give them;
    Fashion-MNIST's images keep their own 28 x 28, :mod:`yasgd.data.fit`)."""
    m = cfg.model
    size, what, key = largest_parameter(m.name, m.width, m.classes,
                                        1 if cfg.data.kind == "fashion_mnist" else 3)
    if size >= TENSOR_LIMIT:
        value = getattr(m, key.split(".")[1])
        raise UsageError(f"config key {key}={value}: {what} would have {size:,} elements; "
                         f"{NO_LARGE_TENSORS}")
    batch = _micro_batch(cfg, world_size)
    if cfg.data.kind == "fashion_mnist" or batch is None:
        return
    one, what = largest_activation(m.name, m.width, m.stem_stride, cfg.data.image_size, 3,
                                   m.classes)
    if batch * one >= TENSOR_LIMIT:
        raise UsageError(f"config key data.image_size={cfg.data.image_size}: on a rank's "
                         f"micro-batch of {batch:,} images ({world_size} rank"
                         f"{'' if world_size == 1 else 's'}), {what} "
                         f"would have {batch * one:,} elements; {NO_LARGE_TENSORS} (lower "
                         f"data.image_size, or the micro-batch: train.global_batch, "
                         f"train.accumulate)")


def check(cfg, device: str, world_size: int = 1, ranks_here: Optional[int] = None) -> None:
    """UsageError where ``cfg`` cannot train on ``device`` at ``world_size`` ranks; with
    ``ranks_here``, also where that many CPU ranks would not fit this host's memory
    (:mod:`yasgd.hostmem`)."""
    from yasgd import config
    if ranks_here and ranks_here > world_size:
        raise UsageError(f"--ranks-on-host {ranks_here} is more than the job's ranks "
                         f"(--world-size {world_size}): a host runs at most all of them")
    config.check_device(cfg, device)
    if device == "cpu" and cfg.model.dtype == "float16":
        raise UsageError(FLOAT16_NEEDS_GPU)
    check_tensors(cfg, world_size)
    if device == "cpu" and ranks_here:
        _check_host_memory(cfg, world_size, ranks_here)


def _micro_batch(cfg, world_size: int) -> Optional[int]:
    """A rank's micro-batch at ``world_size`` ranks, or None where the global batch cannot
    be split that way (each command refuses that itself, at its real world size)."""
    from yasgd import config
    try:
        return config.per_rank_batch(cfg, world_size)
    except UsageError:
        return None


def _check_host_memory(cfg, world_size: int, ranks_here: int) -> None:
    from yasgd import hostmem
    batch = _micro_batch(cfg, world_size)
    if batch is not None:
        hostmem.check(cfg, batch, ranks_here)


def check_training(cfg) -> None:
    """:func:`check` on the device ``yasgd train``'s ranks will use (MXNet's GPUs, as
    :meth:`yasgd.dist.World.context` chooses), at the world size the launcher announced,
    with the host-memory rule for the ranks it announced on this host where they compute on
    the CPU (no GPU listed). MXNet is imported only where a rule asks for the device
    (float16), so a config refused for another reason never loads it."""
    from yasgd import hostmem
    from yasgd.dist import env_world_size
    world_size, ranks_here = env_world_size(), hostmem.ranks_on_host()
    if cfg.model.dtype != "float16":
        check_tensors(cfg, world_size)   # the device's rules run in training
        if host_device() == "cpu":
            _check_host_memory(cfg, world_size, ranks_here)
        return
    from yasgd.dist import World
    check(cfg, World().context().device_type, world_size, ranks_here)
