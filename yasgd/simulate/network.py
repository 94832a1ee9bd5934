"""ResNet-50's gradient tensors, their groups, and the cost of one allreduce (``yasgd simulate``).

Allreduce cost (alpha-beta model, Thakur, Rabenseifner & Gropp 2005; the constants per NCCL
protocol from NCCL's own cost model, src/graph/tuning.cc):
    ring over n:     2(n-1)/n * S / bw + 2(n-1) * alpha
    hierarchical:    intra-node reduce-scatter (NVLink) + inter-node allreduce of the node's
                     S bytes over its HCAs aggregated + intra-node allgather; inter-node "ring"
                     (2(p-1) alpha) or "tree" (NCCL double binary tree, 2 log2(p) alpha, NCCL's
                     tree bandwidth factor and its size correction)
    collnet:         as hierarchical, but the switches reduce (SHARP, NCCL CollNet): each GPU's
                     shard crosses its HCA once up and once down, S / (HCAs bw), and the
                     latency is one tree level up and one down
Every call also pays NCCL's fixed per-collective latency. Units: bytes, seconds, bytes/s.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from yasgd import UsageError, grouping

ALGORITHMS = ("ring", "hierarchical", "hierarchical_tree", "collnet")

# ---------------------------------------------------------------- ResNet-50 v1.5 gradient tensors


def resnet50_layers(image: int = 224, classes: int = 1000) -> List[Tuple[str, List[int], int]]:
    """(name, parameter sizes, forward MACs per image) per layer, in forward order.
    v1.5: the stride of a downsampling bottleneck sits on its 3x3 conv. BN has gamma and beta."""
    layers: List[Tuple[str, List[int], int]] = []
    hw = image // 2                                                  # conv1 7x7/2
    layers.append(("conv1", [7 * 7 * 3 * 64], 7 * 7 * 3 * 64 * hw * hw))
    layers.append(("bn1", [64, 64], 0))
    hw //= 2                                                         # max-pool 3x3/2
    cin = 64
    for s, (blocks, width) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512))):
        for b in range(blocks):
            stride = 2 if (b == 0 and s > 0) else 1
            out_hw = hw // stride
            p = f"stage{s + 1}.{b}"
            layers.append((p + ".conv1", [cin * width], cin * width * hw * hw))
            layers.append((p + ".bn1", [width, width], 0))
            layers.append((p + ".conv2", [9 * width * width], 9 * width * width * out_hw * out_hw))
            layers.append((p + ".bn2", [width, width], 0))
            layers.append((p + ".conv3", [width * 4 * width], width * 4 * width * out_hw * out_hw))
            layers.append((p + ".bn3", [4 * width, 4 * width], 0))
            if b == 0:
                layers.append((p + ".down", [cin * 4 * width], cin * 4 * width * out_hw * out_hw))
                layers.append((p + ".down_bn", [4 * width, 4 * width], 0))
            cin, hw = 4 * width, out_hw
    layers.append(("fc", [cin * classes, classes], cin * classes))
    return layers


def backward_tensors() -> List[Tuple[str, int, int]]:
    """(name, elements, MACs attributed) per gradient tensor in the order backward produces them:
    fc bias first, conv1 weight last. A layer's MACs go to its last-produced tensor."""
    out = []
    for name, sizes, macs in reversed(resnet50_layers()):
        for j, n in enumerate(reversed(sizes)):
            out.append((f"{name}[{len(sizes) - 1 - j}]", n, macs if j == len(sizes) - 1 else 0))
    return out


def layer_of(tensor_name: str) -> str:
    """The layer of a :func:`backward_tensors` name (``stage2.0.bn1[1]`` -> ``stage2.0.bn1``)."""
    return tensor_name.split("[", 1)[0]


def group_sizes(tensor_bytes_in_backward_order: Sequence[int], budget_bytes: int,
                layers: Optional[Sequence[str]] = None) -> List[int]:
    """yasgd's static grouping (:func:`yasgd.grouping.group_bytes`): consecutive layers are
    packed until adding the next would exceed the budget; a layer larger than the budget gets a
    group of its own. Returns group bytes."""
    return grouping.group_bytes(tensor_bytes_in_backward_order, budget_bytes, layers=layers)


def grouped(sizes: Sequence[int], budget_bytes: int = grouping.DEFAULT_BUDGET_BYTES,
            num_groups: int = 0, layers: Optional[Sequence[str]] = None) -> List[Tuple[int, int]]:
    """(backward index of the tensor that completes the group, bytes) per group of
    :func:`yasgd.grouping.group_indices` (the budget split, or ``num_groups`` equal-bytes groups
    as MXNet's ``MXNET_HOROVOD_NUM_GROUPS`` makes them)."""
    return [(max(g), int(sum(sizes[i] for i in g)))
            for g in grouping.group_indices(sizes, budget_bytes, num_groups, layers)]


def is_batchnorm(tensor_name: str) -> bool:
    """BN gamma/beta (``bn1[0]``, ``stage2.0.down_bn[1]``): MXNet's BatchNorm infers them as
    float32 for float16 data (BatchNormType in src/operator/nn/batch_norm.cc; checked with MXNet
    1.9.1's infer_type), so Fujitsu's Horovod reduces them separately (fujitsu_cubic_groups)."""
    return "bn" in tensor_name.split("[")[0].split(".")[-1]


def fujitsu_cubic_bounds(payload: int = 161, transfersize: int = 3) -> List[Tuple[int, int]]:
    """Forward-order tensor-id ranges [begin, end) of the groups of Fujitsu's MLPerf v0.6 Horovod
    (``HOROVOD_CUBIC_TRANSFER_MODE=1``, ``HOROVOD_FIXED_PAYLOAD=161``,
    ``HOROVOD_FIXED_TRANSFERSIZE=3`` in JobScripts/parameters; 3rdparty/horovod/.../operations.cc:
    group k = [P - (k+1)^3 F, P - k^3 F) clipped at 0), in the order they are reduced (the last
    layers first). 161, 3 -> 3, 21, 57, 80 tensors."""
    out, k = [], 0
    while True:
        begin = max(payload - (k + 1) ** 3 * transfersize, 0)
        out.append((begin, max(payload - k ** 3 * transfersize, 0)))
        if begin == 0:
            return out
        k += 1


def fujitsu_cubic_groups(grad_bytes: int = 2, fp32_bytes: int = 4) -> List[Tuple[int, int]]:
    """(index in backward order of the tensor that completes the group, bytes) per collective of
    Fujitsu's 2019 Horovod: the cubic groups of float16 tensors, then one collective of every
    float32 tensor (BN gamma/beta), which operations.cc queues (fp32_message_queue) and reduces
    after the last group. Groups without float16 bytes launch nothing."""
    t = backward_tensors()
    last = len(t) - 1
    groups, fp32 = [], 0
    for begin, end in fujitsu_cubic_bounds(len(t)):
        idx = [last - i for i in range(begin, end)]            # forward id i -> backward index
        fp16 = sum(t[i][1] * grad_bytes for i in idx if not is_batchnorm(t[i][0]))
        fp32 += sum(t[i][1] * fp32_bytes for i in idx if is_batchnorm(t[i][0]))
        if fp16:
            groups.append((max(idx), fp16))
    if fp32:
        groups.append((last, fp32))
    return groups



def ring_allreduce_time(nbytes: float, n: int, bw: float, latency: float) -> float:
    """2(n-1)/n * bytes/bw + 2(n-1) * latency; 0 for n = 1."""
    return 0.0 if n <= 1 else 2 * (n - 1) / n * nbytes / bw + 2 * (n - 1) * latency


def ring_reduce_scatter_time(nbytes: float, n: int, bw: float, latency: float) -> float:
    """(n-1)/n * bytes/bw + (n-1) * latency (an allgather costs the same)."""
    return 0.0 if n <= 1 else (n - 1) / n * nbytes / bw + (n - 1) * latency


def tree_allreduce_time(nbytes: float, n: int, bw: float, latency: float) -> float:
    """Halving-doubling (Rabenseifner): 2(n-1)/n * bytes/bw + 2 ceil(log2 n) * latency."""
    return 0.0 if n <= 1 else 2 * (n - 1) / n * nbytes / bw + 2 * math.ceil(math.log2(n)) * latency


@dataclass(frozen=True)
class Topology:
    gpus_per_node: int
    nvlink_bw: float       # B/s one direction per GPU, what an intra-node ring can use
    nvlink_latency: float  # s per intra-node ring step
    hca_bw: float          # B/s one direction per InfiniBand HCA
    hcas_per_node: int
    ib_latency: float      # s per inter-node ring step
    ib_tree_latency: float # s per inter-node tree level
    call_latency: float    # s per collective call (launch, NCCL base latency)
    tree_bw_factor: float = 1.0               # NCCL tuning.cc: tree busBw x .9
    tree_correction: Tuple[float, ...] = ()   # NCCL treeCorrectionFactor row; () = none


def tree_correction(table: Sequence[float], nbytes_per_rank: float) -> float:
    """NCCL's size correction of tree bandwidth (tuning.cc, ncclTopoGetAlgoTime): "Trees are not
    perfectly sticking to the model for medium sizes": bw *= table[log2i(bytes >> 6)] while that
    index is inside the table (64 B, 128 B, ... per power of two), 1 past it."""
    n = int(nbytes_per_rank) >> 6
    i = n.bit_length() - 1 if n > 0 else 0
    return table[i] if i < len(table) else 1.0


def allreduce_time(nbytes: float, gpus: int, topo: Topology, algorithm: str) -> float:
    """Time of one allreduce of ``nbytes`` across ``gpus`` GPUs on ``topo`` (0 on one GPU)."""
    if gpus <= 1 or nbytes <= 0:
        return 0.0
    g = min(topo.gpus_per_node, gpus)
    nodes = math.ceil(gpus / g)
    node_bw = topo.hca_bw * topo.hcas_per_node
    if algorithm == "ring":   # one flat ring; each step waits for its slowest hop
        bw = topo.nvlink_bw if nodes == 1 else min(topo.nvlink_bw, node_bw)
        lat = topo.nvlink_latency if nodes == 1 else topo.ib_latency
        return topo.call_latency + ring_allreduce_time(nbytes, gpus, bw, lat)
    if algorithm not in ALGORITHMS:
        raise UsageError(f"unknown allreduce algorithm {algorithm!r}; one of {ALGORITHMS}")
    intra = ring_reduce_scatter_time(nbytes, g, topo.nvlink_bw, topo.nvlink_latency)
    if algorithm == "hierarchical":
        inter = ring_allreduce_time(nbytes, nodes, node_bw, topo.ib_latency)
    elif algorithm == "collnet":   # in-network reduction: the node's bytes go up once, down once
        inter = 0.0 if nodes <= 1 else nbytes / node_bw + 2 * topo.ib_tree_latency
    else:   # the cross-node call of each GPU carries its reduce-scattered shard, nbytes / g
        bw = node_bw * topo.tree_bw_factor * tree_correction(topo.tree_correction, nbytes / g)
        inter = tree_allreduce_time(nbytes, nodes, bw, topo.ib_tree_latency)
    return topo.call_latency + 2 * intra + inter

