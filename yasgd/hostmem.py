"""The host-memory rule of a CPU training: the activations one training step must hold at
once on this host's ranks, against the memory this host has.

A step on the CPU keeps every convolution's output until the backward pass reaches its
batch norm (BN's backward reads its input), and the micro-batch itself until the stem's
backward; all of them are alive when the forward pass ends. :func:`held_for_backward` is
their size for one image of yasgd's ResNets in closed form (tests/unit/test_host_memory.py
checks it against MXNet's shape inference). It is a lower bound of what a step needs: the
gradients, the BN and ReLU outputs, the parameters, the optimizer's state, oneDNN's padded
layouts and MXNet itself come on top. So a config whose bound is over this host's memory
cannot train here, and is refused before any work; one under it may still not fit. The
operating system's out-of-memory killer would otherwise end a rank (``Killed``, exit status
137) after the run directory was made, once the host had swapped for minutes. GPU ranks hold
their activations on the GPU: the rule is the CPU's.
"""
from __future__ import annotations

import os
from typing import Iterator, Optional, Tuple

from yasgd import UsageError
from yasgd.config_checks import BASIC_DEPTHS, BOTTLENECK_DEPTHS, model_depth
from yasgd.envcheck import launcher_count, task_counts

#: float32, the only dtype MXNet trains in on the CPU (float16 is refused there)
BYTES_PER_ELEMENT = 4

#: blocks per stage of the ImageNet ResNets, as :func:`yasgd.model.build` builds them
_STAGES = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3), 50: (3, 4, 6, 3), 101: (3, 4, 23, 3),
           152: (3, 8, 36, 3)}

#: where the launchers announce how many of the job's ranks run on this host
_LOCAL_SIZE_VARS = ("OMPI_COMM_WORLD_LOCAL_SIZE", "HOROVOD_LOCAL_SIZE", "MPI_LOCALNRANKS")


def _side(side: int, stride: int) -> int:
    return (side - 1) // stride + 1      # a padded convolution or pool of that stride


def conv_outputs(name: str, width: int, stem_stride: int, image: int,
                 in_channels: int) -> Iterator[Tuple[int, int, int]]:
    """(channels, side, stage) of every convolution's output for one ``image`` x ``image``
    image, in :func:`yasgd.model.build`'s order: the stem (stage 0); per block of stage
    1, 2, ... its body's convolutions, then the shortcut's 1x1 where the block changes the
    stride or the channels. A stage's last one has the stage output's shape. The ImageNet
    ResNets' stem is a 7x7 convolution of stride 2 to 64 channels and a 3x3 max-pool of
    stride 2; the small ResNets' a 3x3 convolution of stride ``model.stem_stride`` to
    ``width`` channels. Each stage after the first has stride 2."""
    depth = model_depth(name)
    if depth in BOTTLENECK_DEPTHS or depth in BASIC_DEPTHS:
        side = _side(image, 2)
        yield 64, side, 0
        side, channels = _side(side, 2), 64                      # the 3x3 max-pool
        widths = (256, 512, 1024, 2048) if depth in BOTTLENECK_DEPTHS else (64, 128, 256, 512)
        layers = _STAGES[depth]
    else:
        side, channels = _side(image, stem_stride), width
        yield width, side, 0
        n = (depth - 2) // 6
        widths, layers = (width, 2 * width, 4 * width), (n, n, n)
    for stage, (n, out) in enumerate(zip(layers, widths), 1):
        for i in range(n):
            stride = 2 if (i == 0 and stage > 1) else 1
            after = _side(side, stride)
            if depth in BOTTLENECK_DEPTHS:       # 1x1, 3x3 (the stride: v1.5), 1x1
                yield from ((out // 4, side, stage), (out // 4, after, stage),
                            (out, after, stage))
            else:                                # 3x3 (the stride), 3x3
                yield from ((out, after, stage), (out, after, stage))
            if stride != 1 or channels != out:
                yield out, after, stage
            side, channels = after, out


def held_for_backward(name: str, width: int, stem_stride: int, image: int,
                      in_channels: int) -> int:
    """Elements one image keeps alive from the forward pass to the backward pass: its input
    and every convolution's output."""
    return in_channels * image * image + sum(c * s * s for c, s, _ in conv_outputs(
        name, width, stem_stride, image, in_channels))


def _read_int(path: str) -> Optional[int]:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def host_memory() -> Tuple[int, str]:
    """(bytes, what they are) this host's processes may use at most: RAM and swap
    (``/proc/meminfo``), or the memory limit of this container's cgroup where it is lower
    (v2 ``memory.max`` and ``memory.swap.max``; v1 ``memory.limit_in_bytes``)."""
    info = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if rest.split() and rest.split()[0].isdigit():
                info[key] = int(rest.split()[0]) * 1024
    total = info.get("MemTotal", 0) + info.get("SwapTotal", 0)
    what = "RAM and swap" if info.get("SwapTotal") else "RAM, no swap"
    limit = _read_int("/sys/fs/cgroup/memory.max")
    if limit is not None:
        limit += _read_int("/sys/fs/cgroup/memory.swap.max") or 0
    else:
        limit = _read_int("/sys/fs/cgroup/memory/memory.limit_in_bytes")
    if limit is not None and limit < total:
        return limit, "its cgroup's memory limit"
    return total, what


def ranks_on_host() -> int:
    """How many ranks of this job run on this host, as its launcher announced it (OpenMPI,
    horovodrun, MPICH, srun); 1 where none did."""
    for var in _LOCAL_SIZE_VARS:
        count = launcher_count(var)
        if count is not None:
            return max(1, count)
    node = launcher_count("SLURM_NODEID")
    counts = task_counts(os.environ.get("SLURM_STEP_TASKS_PER_NODE", "")) or []
    return counts[node] if node is not None and node < len(counts) else 1


def check(cfg, micro_batch: int, ranks: int, memory: Optional[Tuple[int, str]] = None) -> None:
    """UsageError where ``ranks`` CPU ranks of ``cfg`` on this host, each on a micro-batch of
    ``micro_batch`` images, would hold more activations than the host's memory
    (``memory``: (bytes, what they are), default :func:`host_memory`)."""
    m, fmnist = cfg.model, cfg.data.kind == "fashion_mnist"
    image, channels = (28, 1) if fmnist else (cfg.data.image_size, 3)
    one = held_for_backward(m.name, m.width, m.stem_stride, image, channels)
    rank = one * micro_batch * BYTES_PER_ELEMENT
    have, what = memory or host_memory()
    if ranks * rank <= have:
        return
    key = (f"train.global_batch={cfg.train.global_batch}" if fmnist
           else f"data.image_size={cfg.data.image_size}")
    places = next((p for p in range(1, 9) if _gb(ranks * rank, p) != _gb(have, p)), 9)
    on_host = "" if ranks == 1 else f"; {ranks} ranks on this host: {_gb(ranks * rank, places)}"
    raise UsageError(
        f"config key {key}: a training step on a rank's micro-batch of {micro_batch:,} images "
        f"of {image} x {image} px keeps at least {_gb(rank, places)} of activations for the "
        f"backward pass (the input and every convolution's output{on_host}), more than the "
        f"{_gb(have, places)} this host has ({what}); lower data.image_size, or the "
        f"micro-batch (train.global_batch, train.accumulate), or use fewer ranks on a host")


def _gb(n: int, places: int) -> str:
    """``n`` bytes in GB at ``places`` decimals: as many as it takes to tell the needed
    memory from the host's"""
    return f"{n / 1e9:,.{places}f} GB"
