"""Scaling model of synchronous data-parallel ResNet-50 training (``yasgd simulate``).

One iteration (all GPUs run the same program; data loading is inside the published throughput):

    forward  t_f = C/3,  backward t_b = 2C/3   (backward ~ 2x forward FLOPs: input and weight grads)
    C + t_u = b / X(b)                         (X: per-GPU training img/s at batch b, t_u: optimizer
                                                update, HBM-bound, runs after the last allreduce)
    X(b) = X(ref) * min(1, b/(b+h) * (ref+h)/ref)   (step time = fixed + per-image cost; h, the
               batch whose per-image cost equals the fixed cost, from published tables: the GPU's
               fp16 inference h x the training/inference ratio of h in MXNet's own V100 tables)
    lock-step: on N > 1 GPUs every rank waits for the slowest, so C -> C * L(N), L(N) = 1 + E[max of
               N draws of (U + G)], U ~ uniform GPU-to-GPU speed spread, G ~ normal step-time jitter
    gradient tensor i is ready once backward has done t_b * (conv/fc MACs so far) / (all MACs)
    groups: yasgd's static budget grouping, or the preset's (abci2019: Fujitsu's cubic groups);
            ready_g = ready of its last tensor
    one communication channel: start_g = end_{g-1} if the group was ready before, otherwise
            ready_g + cycle/2 (the Horovod background loop polls every cycle);
            end_g = start_g + T(bytes_g) + fusion-buffer copies
    while a collective runs, backward runs on the SMs NCCL leaves free (rate 1 - channels/SMs)
    iteration = max(end of backward, end_last) + t_u            (never shorter than compute)

Allreduce cost T (alpha-beta model, Thakur, Rabenseifner & Gropp 2005; constants per NCCL protocol
from NCCL's own cost model, src/graph/tuning.cc):
    ring over n:     2(n-1)/n * S / bw + 2(n-1) * alpha
    hierarchical:    intra-node reduce-scatter (NVLink) + inter-node allreduce of the node's
                     S bytes over its HCAs aggregated + intra-node allgather; inter-node "ring"
                     (2(p-1) alpha) or "tree" (NCCL double binary tree, 2 log2(p) alpha, NCCL's
                     tree bandwidth factor and its size correction); the presets use the tree
                     (Preset.algorithm), the table shows all
Every call also pays NCCL's fixed per-collective latency. Units: bytes, seconds, bytes/s.
"""
from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from yasgd import UsageError

IMAGENET_TRAIN = 1_281_167      # ILSVRC-2012 training images
IMAGENET_VAL = 50_000           # ILSVRC-2012 validation images
DEFAULT_BUDGET = 4 << 20        # = yasgd.config.CommCfg.group_budget_bytes (test pins it)
ALGORITHMS = ("ring", "hierarchical", "hierarchical_tree")
GROUPINGS = ("budget", "fujitsu_cubic")
GB = 1e9
US = 1e-6

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


def group_sizes(tensor_bytes_in_backward_order: Sequence[int], budget_bytes: int) -> List[int]:
    """yasgd's static grouping: consecutive tensors are packed until adding the next would exceed
    the budget; a tensor larger than the budget gets a group of its own. Returns group bytes."""
    return [sum(tensor_bytes_in_backward_order[a:b])
            for a, b in _group_bounds(tensor_bytes_in_backward_order, budget_bytes)]


def _group_bounds(sizes: Sequence[int], budget: int) -> List[Tuple[int, int]]:
    bounds, start, acc = [], 0, 0
    for i, n in enumerate(sizes):
        if i > start and acc + n > budget:
            bounds.append((start, i))
            start, acc = i, 0
        acc += n
    if sizes:
        bounds.append((start, len(sizes)))
    return bounds


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

# ---------------------------------------------------------------- allreduce cost


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
    if algorithm not in ("hierarchical", "hierarchical_tree"):
        raise UsageError(f"unknown allreduce algorithm {algorithm!r}; one of {ALGORITHMS}")
    intra = ring_reduce_scatter_time(nbytes, g, topo.nvlink_bw, topo.nvlink_latency)
    if algorithm == "hierarchical":
        inter = ring_allreduce_time(nbytes, nodes, node_bw, topo.ib_latency)
    else:   # the cross-node call of each GPU carries its reduce-scattered shard, nbytes / g
        bw = node_bw * topo.tree_bw_factor * tree_correction(topo.tree_correction, nbytes / g)
        inter = tree_allreduce_time(nbytes, nodes, bw, topo.ib_tree_latency)
    return topo.call_latency + 2 * intra + inter

# ---------------------------------------------------------------- presets


@dataclass(frozen=True)
class Preset:
    topo: Topology
    images_per_gpu_s: float       # published single-GPU training img/s at ref_batch
    ref_batch: int
    infer_curve: Tuple[Tuple[int, float], ...]   # published inference img/s by batch (same GPU)
    hbm_bw: float                 # B/s
    # published training and inference (scoring) img/s by batch of one MXNet build on one GPU:
    # the ratio of their fixed-cost batches h is what a training step adds at small batch
    train_shape: Tuple[Tuple[int, float], ...] = ()
    score_shape: Tuple[Tuple[int, float], ...] = ()
    # the inference curve h is read from, where infer_curve cannot give it; () = infer_curve
    fixed_cost_curve: Tuple[Tuple[int, float], ...] = ()
    grad_bytes: int = 2           # fp16 gradients (float16 training, Fujitsu MLPerf v0.6 recipe)
    # LARS with fp32 master weights: read w, m, fp16 g + write w, m, fp16 w (18 B) + norms (4 B)
    update_bytes_per_param: int = 22
    # NCCL reduce-scatter in the node, NCCL allreduce across nodes, NCCL allgather: the 2-stage
    # allreduce of Fujitsu's MLPerf v0.6 code (HOROVOD_ALLREDUCE_MODE=1, "hierarchical on GPU");
    # NCCL >= 2.4 runs the cross-node allreduce as a double binary tree at this scale.
    algorithm: str = "hierarchical_tree"
    eval_every: int = 4           # epochs between evaluations (MLPerf rule, Fujitsu v0.6 recipe)
    epoch_fixed_s: float = 0.0    # per-epoch loader restart etc.: no public figure, so 0 (explicit)
    # which groups are reduced when --budget-bytes is not given: "budget" (yasgd's static grouping
    # at DEFAULT_BUDGET) or "fujitsu_cubic" (fujitsu_cubic_groups)
    grouping: str = "budget"
    horovod_cycle_s: float = 0.0  # Horovod background-loop period (a ready group waits cycle/2)
    fusion_copies: int = 0        # fusion-buffer copies per group (in + out), each reads and writes
    nccl_channels: int = 0        # CTAs (one SM each) a running NCCL kernel holds; 0 = not modelled
    sms: int = 0                  # streaming multiprocessors of the GPU
    # published per-batch step-time percentiles of one GPU, (batch, mean, p50, p90) in ms: their
    # spread is the per-iteration jitter whose maximum over N ranks the lock-step pays
    latency_curve: Tuple[Tuple[int, float, float, float], ...] = ()
    gpu_spread: float = 0.0       # GPU-to-GPU speed spread of one SKU (full width, fraction)
    note: str = ""


# NCCL's own cost model, src/graph/tuning.cc (NCCL 2.7, github.com/NVIDIA/nccl). LL128 per-step
# latencies (NCCL's default protocol on Volta/Hopper + NVLink since 2.5): NVLink ring 1.9 us,
# network ring 4.0 us, network tree 8.5 us per level, baseLat ring LL128 10.0 us per call.
_NCCL_NVLINK_STEP = 1.9 * US
_NCCL_NET_STEP = 4.0 * US
_NCCL_NET_TREE_STEP = 8.5 * US
_NCCL_CALL = 10.0 * US
# Simple protocol, same table: the one ABCI ran in 2019. Fujitsu's MLPerf v0.6 submission (same
# team, same system; Fujitsu/benchmarks/resnet/abci_2048xV100_mxnet/README.md) names NCCL v2.4.2,
# which predates LL128 (NCCL 2.5), and sets NCCL_LL_THRESHOLD=1024 (JobScripts/parameters): every
# gradient group above 1 KiB uses Simple. Simple: NVLink ring 3.4 us, network ring 9.6 us per
# step, network tree 50 us per level ("the latency of a 256kB chunk"), baseLat ring 8.4 us.
_NCCL_SIMPLE_NVLINK_STEP = 3.4 * US
_NCCL_SIMPLE_NET_STEP = 9.6 * US
_NCCL_SIMPLE_NET_TREE_STEP = 50.0 * US
_NCCL_SIMPLE_CALL = 8.4 * US
# Same file: "if (a == NCCL_ALGO_TREE) busBw = std::min(busBw*.9, maxTreeBw)", and the Simple row
# of treeCorrectionFactor (64 B .. 128 MB per rank, powers of two).
_NCCL_TREE_BW = 0.9
_NCCL_TREE_CORRECTION_SIMPLE = (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .5, .5,
                                .6, .6, .7, .8, .9)
# NVIDIA DeepLearningExamples MxNet/Classification/RN50v1.5 README (mxnet-19.07 container),
# inference on DGX-1 V100 16GB, mixed precision, 1 GPU: latency mean, 50 % and 90 % in ms by batch.
_V100_LATENCY = ((1, 2.5, 2.5, 2.7), (2, 2.7, 2.6, 3.0), (4, 3.2, 3.0, 3.5), (8, 4.0, 3.9, 4.2),
                 (16, 6.0, 5.9, 6.3), (32, 9.9, 9.8, 10.3), (64, 17.0, 17.0, 17.5),
                 (128, 34.3, 33.8, 35.5), (192, 52.7, 52.4, 55.2), (256, 73.9, 72.8, 77.3))
# NVIDIA DeepLearningExamples MxNet/Classification/RN50v1.5 README (mxnet-19.07 container),
# inference on DGX-1 V100 16GB, mixed precision, 1 GPU, img/s by batch (data included).
_V100_INFER = ((1, 397), (2, 732), (4, 1269), (8, 2012), (16, 2667), (32, 3240), (64, 3776),
               (128, 3734), (192, 3641))
# Apache MXNet documentation, "Some Tips for Improving MXNet Performance" (docs/faq/perf.md in
# apache/mxnet; mxnet.apache.org/versions/1.5.0/faq/perf.html), section "Nvidia GPU", V100 (EC2
# p3.2xlarge), MXNet 1.2.0.rc1, cuDNN 7.0.5, float32: ResNet-50 img/s by batch, "Training results"
# (example/image-classification/train_imagenet.py, mli/mxnet-benchmark run_vary_batch.sh) and
# "Scoring results" (benchmark_score.py). The one public pair of MXNet V100 training and inference
# curves from one build: training loses more at small batch (at 32: 82 % of its rate at 128,
# inference 87 %), which an inference curve alone does not show.
_MXNET_V100_TRAIN_FP32 = ((1, 34.54), (2, 65.01), (4, 113.49), (8, 174.81), (16, 251.22),
                          (32, 298.51), (64, 343.19), (128, 363.69))
_MXNET_V100_SCORE_FP32 = ((1, 162.15), (2, 293.74), (4, 479.14), (8, 699.39), (16, 947.45),
                          (32, 1076.81), (64, 1168.37), (128, 1233.15), (256, 1155.07))
# Sinha et al., "Not All GPUs Are Created Equal: Characterizing Variability in Large-Scale,
# Accelerator-Rich Systems", SC'22 (arXiv 2208.11035 v3 abstract): 8 % average performance
# variation (max 22 %) across GPUs of one SKU on V100 clusters (Summit, Vortex, Longhorn).
_GPU_SPREAD = 0.08

PRESETS: Dict[str, Preset] = {
    "abci2019": Preset(
        topo=Topology(
            gpus_per_node=4,                 # ABCI node (2018-): 4x Tesla V100 SXM2 (paper.md)
            nvlink_bw=150 * GB,              # V100 SXM2 datasheet: NVLink 300 GB/s, both directions
            nvlink_latency=_NCCL_SIMPLE_NVLINK_STEP,
            hca_bw=12.5 * GB,                # InfiniBand EDR 100 Gb/s (Mellanox ConnectX-4/5 brief)
            hcas_per_node=2,                 # ABCI node: 2x InfiniBand EDR HCAs (paper.md)
            ib_latency=_NCCL_SIMPLE_NET_STEP, ib_tree_latency=_NCCL_SIMPLE_NET_TREE_STEP,
            call_latency=_NCCL_SIMPLE_CALL,
            tree_bw_factor=_NCCL_TREE_BW, tree_correction=_NCCL_TREE_CORRECTION_SIMPLE),
        # NVIDIA DeepLearningExamples MxNet/Classification/RN50v1.5 README, mxnet-19.07 container,
        # DGX-1 V100 16GB, 1 GPU, mixed precision, batch 192: 1,427 img/s (training, data included).
        images_per_gpu_s=1427.0, ref_batch=192,
        # Same README, inference V100 16GB mixed precision img/s by batch (small-batch cost, eval).
        infer_curve=_V100_INFER,
        # MXNet's own V100 training and scoring tables: what training adds to inference's h.
        train_shape=_MXNET_V100_TRAIN_FP32, score_shape=_MXNET_V100_SCORE_FP32,
        hbm_bw=900 * GB,                     # V100 SXM2 datasheet: HBM2 900 GB/s
        # Fujitsu MLPerf v0.6 Horovod (3rdparty/horovod/horovod/common/operations.cc): the cubic
        # groups; HOROVOD_CYCLE_TIME=0.2 (ms, JobScripts/parameters); each group is packed into and
        # unpacked from the fusion buffer by batched_d2d_memcpy (horovod.patch): 2 copies.
        grouping="fujitsu_cubic", horovod_cycle_s=0.2e-3, fusion_copies=2,
        # NCCL_MIN_NRINGS=4 (JobScripts/parameters): at least 4 channels, one CTA each, while a
        # collective runs; V100 has 80 SMs (NVIDIA Tesla V100 datasheet / Volta whitepaper).
        nccl_channels=4, sms=80,
        latency_curve=_V100_LATENCY, gpu_spread=_GPU_SPREAD),
    "abci3": Preset(
        topo=Topology(
            gpus_per_node=8,                 # ABCI 3.0: 8x H200 SXM per node (Takano et al. 2024)
            nvlink_bw=450 * GB,              # H200 datasheet: NVLink 900 GB/s both directions
            nvlink_latency=_NCCL_NVLINK_STEP,
            hca_bw=25 * GB,                  # InfiniBand NDR200: 200 Gb/s per HCA (ConnectX-7)
            hcas_per_node=8,                 # ABCI 3.0: 8x NDR200 per node (same paper)
            ib_latency=_NCCL_NET_STEP, ib_tree_latency=_NCCL_NET_TREE_STEP,
            call_latency=_NCCL_CALL, tree_bw_factor=_NCCL_TREE_BW),
        # No public MXNet ResNet-50 training figure exists for H200: the nearest published one is
        # DeepLearningExamples RN50v1.5 MXNet, mxnet-20.12, DGX A100 80GB, 1 GPU, mixed, batch 256:
        # 2,180 img/s. Used as a stated floor; pass --images-per-gpu-s to override.
        images_per_gpu_s=2180.0, ref_batch=256,
        infer_curve=((1, 463), (2, 880), (4, 1668), (8, 2522), (16, 3704), (32, 2964),
                     (64, 4547), (128, 5530), (192, 6198), (256, 6120)),   # same README, A100
        # Placeholder, stated: that A100 table is loader-bound (b = 32 slower than b = 16), so its
        # fixed cost reads as h = 74 images at b = 40; the V100 table gives h instead. There are no
        # public MXNet training/inference tables by batch for A100 or H200: the V100 ones.
        fixed_cost_curve=_V100_INFER,
        train_shape=_MXNET_V100_TRAIN_FP32, score_shape=_MXNET_V100_SCORE_FP32,
        hbm_bw=4800 * GB,                    # H200 datasheet: HBM3e 4.8 TB/s
        # yasgd's own static groups on stock Horovod 0.28: default cycle 1 ms since Horovod 0.21.0
        # ("Changed default cycle time from 5ms to 1ms", #2468), batched fusion copies (#2435).
        horovod_cycle_s=1e-3, fusion_copies=2,
        # Placeholders, stated: no public H200 step-time percentiles (the A100 table in the same
        # README is loader-bound: b=32 slower than b=16, p90 30-40 % above p50), so the V100 jitter;
        # the SC'22 spread was measured on V100 and MI60 clusters, not H200. NCCL channels: no
        # public figure for this system, not modelled.
        latency_curve=_V100_LATENCY, gpu_spread=_GPU_SPREAD,
        note="per-GPU compute: A100's published figure, no public H200 MXNet number"),
}


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise UsageError(f"unknown preset {name!r}; one of {', '.join(PRESETS)}")
    return PRESETS[name]


def fixed_cost_batch(curve: Sequence[Tuple[int, float]], per_gpu_batch: float) -> float:
    """h = t0 / c of the step-time line t(x) = t0 + c x through the two published (batch, img/s)
    points that bracket the batch (the first or last two outside the table): the batch whose
    per-image cost equals the step's fixed cost, so that a GPU runs at b / (b + h) of its
    large-batch rate. 0 where the published time per step does not show a positive fixed cost."""
    pts = sorted(curve)
    if len(pts) < 2:
        return 0.0
    i = next((k for k in range(1, len(pts)) if per_gpu_batch <= pts[k][0]), len(pts) - 1)
    (b0, x0), (b1, x1) = pts[i - 1], pts[i]
    t0, t1 = b0 / x0, b1 / x1
    c = (t1 - t0) / (b1 - b0)
    fixed = t0 - c * b0
    return fixed / c if c > 0 and fixed > 0 else 0.0


def train_fixed_cost_batch(preset: Preset, per_gpu_batch: float) -> float:
    """h of a training step at this batch: the preset GPU's (fp16) inference h times the ratio of
    training h to inference h in the preset's pair of same-build tables (MXNet's V100 ones), read
    at the batch clamped to where both tables have data. Assumption: training multiplies h by
    the same factor in fp16 as MXNet's tables show in fp32."""
    h = fixed_cost_batch(preset.fixed_cost_curve or preset.infer_curve, per_gpu_batch)
    if preset.train_shape and preset.score_shape:
        top = min(max(b for b, _ in preset.train_shape), max(b for b, _ in preset.score_shape))
        at = min(per_gpu_batch, top)
        h_score = fixed_cost_batch(preset.score_shape, at)
        if h_score > 0:
            h *= fixed_cost_batch(preset.train_shape, at) / h_score
    return h


def per_gpu_throughput(preset: Preset, per_gpu_batch: int) -> float:
    """X(b) = X(ref) * min(1, b/(b+h) * (ref+h)/ref), h = train_fixed_cost_batch: a step costs a
    fixed time plus a per-image time (the compute analogue of the alpha-beta model), so the
    published rate at the reference batch carries to a smaller batch through h alone. The
    published rate is never extrapolated upwards (min 1)."""
    h = train_fixed_cost_batch(preset, per_gpu_batch)
    ref = preset.ref_batch
    return preset.images_per_gpu_s * min(1.0, per_gpu_batch / (per_gpu_batch + h) * (ref + h) / ref)


def inference_factor(preset: Preset, per_gpu_batch: float) -> float:
    """min(1, I*(b) / I*(ref)), I* the running maximum of the preset's published inference curve
    (linear between points): how much slower a forward-only pass runs at this batch."""
    env, best = [], 0.0
    for b, v in preset.infer_curve:
        best = max(best, v)
        env.append((b, best))

    def at(b: float) -> float:
        if b <= env[0][0]:
            return env[0][1] * b / env[0][0]
        for (b0, v0), (b1, v1) in zip(env, env[1:]):
            if b <= b1:
                return v0 + (v1 - v0) * (b - b0) / (b1 - b0)
        return env[-1][1]
    return min(1.0, at(per_gpu_batch) / at(preset.ref_batch))

# ---------------------------------------------------------------- lock-step (stragglers)

_Z90 = 1.2815515655446004        # standard normal 90 % quantile


def _phi(x: float) -> float:
    return math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def _Phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2)))


def lockstep_factor(n: int, cv: float, spread: float) -> float:
    """L(n) = 1 + E[max over n ranks of (U + G)]: the slowest rank's step time over the mean one's.
    U ~ uniform(-spread/2, spread/2) (fixed speed of each GPU), G ~ normal(0, cv) (per-iteration
    jitter), both relative. Closed forms: spread = 0 -> 1 + cv z(n), z = E[max of n standard
    normals] (z(2) = 1/sqrt(pi)); cv = 0 -> 1 + spread/2 (n-1)/(n+1). 1 for n <= 1."""
    if n <= 1 or (cv <= 0 and spread <= 0):
        return 1.0
    if cv <= 0:
        return 1.0 + spread / 2 * (n - 1) / (n + 1)
    return 1.0 + _lockstep_excess(n, float(cv), float(spread))


_EXCESS_CACHE: Dict[Tuple[int, float, float], float] = {}


def _lockstep_excess(n: int, cv: float, spread: float) -> float:
    key = (n, cv, spread)
    if key not in _EXCESS_CACHE:
        a = spread / 2
        if a <= 1e-6 * cv:   # the uniform term is negligible (and its closed form cancels badly)
            cdf = lambda x: _Phi(x / cv)                                    # noqa: E731
        else:   # uniform(-a, a) + normal(0, cv): F(x) = cv/(2a) [psi((x+a)/cv) - psi((x-a)/cv)]
            psi = lambda t: t * _Phi(t) + _phi(t)                           # noqa: E731
            cdf = lambda x: cv / (2 * a) * (psi((x + a) / cv) - psi((x - a) / cv))  # noqa: E731
        lo, hi = -(a + 9 * cv), a + 9 * cv
        # E[max] = int_0^hi (1 - F^n) dx - int_lo^0 F^n dx, computed on each side separately
        _EXCESS_CACHE[key] = (_integrate(lambda x: 1.0 - cdf(x) ** n, 0.0, hi)
                              - _integrate(lambda x: cdf(x) ** n, lo, 0.0))
    return _EXCESS_CACHE[key]


def _integrate(f, lo: float, hi: float, steps: int = 4000) -> float:
    """Simpson's rule on [lo, hi] (steps even)."""
    h = (hi - lo) / steps
    total = f(lo) + f(hi)
    for i in range(1, steps):
        total += (4 if i % 2 else 2) * f(lo + i * h)
    return total * h / 3


def step_cv(preset: Preset, per_gpu_batch: int) -> float:
    """Relative step-time jitter of one GPU at this batch: (p90 - p50) / (z_0.9 mean) of the
    preset's published latency percentiles (a normal body; linear in batch between the published
    batches, clamped at the ends). The training step is assumed to jitter by the same fraction
    as the published inference step at the same batch. 0 without a table."""
    pts = [(b, (p90 - p50) / (_Z90 * mean)) for b, mean, p50, p90 in preset.latency_curve]
    if not pts:
        return 0.0
    if per_gpu_batch <= pts[0][0]:
        return pts[0][1]
    for (b0, c0), (b1, c1) in zip(pts, pts[1:]):
        if per_gpu_batch <= b1:
            return c0 + (c1 - c0) * (per_gpu_batch - b0) / (b1 - b0)
    return pts[-1][1]

# ---------------------------------------------------------------- the iteration model


def _time_at_work(t0: float, work: float, busy: Sequence[Tuple[float, float]],
                  slow: float) -> float:
    """When backward, started at t0, has done ``work`` seconds of full-speed work, if it runs at
    rate 1 - slow during the (sorted, disjoint) intervals ``busy`` and at rate 1 otherwise."""
    t, w = t0, 0.0
    for s, e in busy:
        if e <= t:
            continue
        if s > t:                                # free segment [t, s)
            if w + (s - t) >= work:
                return t + (work - w)
            w, t = w + (s - t), s
        rate = 1.0 - slow                        # shared segment [t, e)
        if w + (e - t) * rate >= work:
            return t + (work - w) / rate
        w, t = w + (e - t) * rate, e
    return t + (work - w)


def iteration(*, gpus: int, per_gpu_batch: int, images_per_gpu_s: float, topo: Topology,
              algorithm: str, budget_bytes: int, grad_bytes: int, update_s: float,
              groups: Optional[Sequence[Tuple[int, int]]] = None, lockstep: float = 1.0,
              cycle_s: float = 0.0, copy_s_per_byte: float = 0.0, sm_share: float = 0.0) -> Dict:
    """One synchronous step: timeline of backward, grouped allreduces and the update (seconds).
    ``groups``: (backward index of the tensor that completes it, bytes) per collective, in order;
    default: yasgd's budget grouping. ``lockstep``: L(N) (only applied on more than one GPU).
    ``cycle_s``: Horovod cycle; ``copy_s_per_byte``: fusion-buffer copy time per group byte;
    ``sm_share``: fraction of the SMs a running collective takes from backward."""
    step = per_gpu_batch / images_per_gpu_s
    compute1 = max(step - update_s, 0.0)
    compute = compute1 * (lockstep if gpus > 1 else 1.0)
    t_f, t_b = compute / 3.0, 2.0 * compute / 3.0
    tensors = backward_tensors()
    sizes = [n * grad_bytes for _, n, _ in tensors]
    total_macs = sum(m for _, _, m in tensors)
    work, acc = [], 0
    for _, _, m in tensors:
        acc += m
        work.append(t_b * acc / total_macs)
    if groups is None:
        groups = [(b - 1, sum(sizes[a:b])) for a, b in _group_bounds(sizes, budget_bytes)]
    end, comm, busy = t_f, 0.0, []
    for last, nbytes in groups:
        cost = allreduce_time(nbytes, gpus, topo, algorithm)
        if cost <= 0:
            continue
        cost += copy_s_per_byte * nbytes
        ready = _time_at_work(t_f, work[last], busy, sm_share)
        start = end if ready <= end else ready + cycle_s / 2
        end = start + cost
        busy.append((start, end))
        comm += cost
    backward_end = _time_at_work(t_f, t_b, busy, sm_share)
    last_end = max(backward_end, end)
    it = last_end + update_s
    return {"iteration_s": it, "compute_s": t_f + t_b, "forward_s": t_f, "backward_s": t_b,
            "update_s": update_s, "comm_s": comm, "exposed_comm_s": last_end - (t_f + t_b),
            "straggler_s": compute - compute1, "sm_contention_s": backward_end - t_f - t_b,
            "groups": len([g for g in groups if g[1] > 0]),
            "grad_bytes": sum(nbytes for _, nbytes in groups)}


def predict(*, preset: str = "abci2019", gpus: int = 2048, batch: int = 81920,
            epochs: float = 90, images_per_gpu_s: Optional[float] = None,
            budget_bytes: Optional[int] = None, algorithm: Optional[str] = None) -> Dict:
    """Iteration time, images/s, scaling efficiency (vs. N x one GPU at the same per-GPU batch)
    and time to train ``epochs`` epochs of ImageNet-1k, as a dict. Without ``budget_bytes`` the
    preset's grouping is used; with it, yasgd's budget grouping at that budget."""
    p = get_preset(preset)
    if gpus < 1:
        raise UsageError(f"--gpus must be >= 1, got {gpus}")
    if batch < 1 or batch % gpus:
        raise UsageError(f"--batch {batch} is not divisible by --gpus {gpus}")
    if epochs <= 0:
        raise UsageError(f"--epochs must be > 0, got {epochs}")
    b = batch // gpus
    x = images_per_gpu_s if images_per_gpu_s is not None else per_gpu_throughput(p, b)
    if x <= 0:
        raise UsageError(f"--images-per-gpu-s must be > 0, got {x}")
    params = sum(n for _, n, _ in backward_tensors())
    if budget_bytes is not None and budget_bytes <= 0:
        raise UsageError(f"--budget-bytes must be > 0, got {budget_bytes}")
    grouping = "budget" if budget_bytes is not None else p.grouping
    budget = (budget_bytes or DEFAULT_BUDGET) if grouping == "budget" else None
    groups = fujitsu_cubic_groups(p.grad_bytes) if grouping == "fujitsu_cubic" else None
    cv = step_cv(p, b)
    lock = lockstep_factor(gpus, cv, p.gpu_spread)
    kw = dict(per_gpu_batch=b, images_per_gpu_s=x, topo=p.topo,
              algorithm=algorithm or p.algorithm, grad_bytes=p.grad_bytes,
              budget_bytes=budget or DEFAULT_BUDGET, groups=groups,
              update_s=params * p.update_bytes_per_param / p.hbm_bw,
              cycle_s=p.horovod_cycle_s, copy_s_per_byte=2.0 * p.fusion_copies / p.hbm_bw,
              sm_share=p.nccl_channels / p.sms if p.sms else 0.0)
    it = iteration(gpus=gpus, lockstep=lock, **kw)
    one = iteration(gpus=1, **kw)
    ips = batch / it["iteration_s"]
    steps_per_epoch = math.ceil(IMAGENET_TRAIN / batch)      # the loader pads the last batch
    evals = math.floor(epochs / p.eval_every) if p.eval_every else 0
    n_val = math.ceil(IMAGENET_VAL / gpus)           # evaluation: forward only, C/3 per image,
    eval_s = n_val / (3 * x) * inference_factor(p, b) / inference_factor(p, n_val) * lock \
        + allreduce_time(8, gpus, p.topo, "hierarchical_tree")   # + reducing the correct count
    train_s = epochs * steps_per_epoch * it["iteration_s"]
    fixed_s = evals * eval_s + math.ceil(epochs) * p.epoch_fixed_s
    return dict(preset=preset, gpus=gpus, nodes=math.ceil(gpus / p.topo.gpus_per_node),
                batch=batch, per_gpu_batch=b, epochs=epochs, algorithm=kw["algorithm"],
                grouping=grouping, budget_bytes=budget, images_per_gpu_s_compute=x,
                compute_given=images_per_gpu_s is not None,
                train_fixed_cost_batch=train_fixed_cost_batch(p, b), **it,
                lockstep=lock, step_cv=cv, gpu_spread=p.gpu_spread,
                horovod_cycle_s=p.horovod_cycle_s, fusion_copies=p.fusion_copies,
                nccl_channels=p.nccl_channels, sms=p.sms,
                images_per_s=ips, images_per_s_per_gpu=ips / gpus,
                efficiency=ips / (gpus * b / one["iteration_s"]),
                steps_per_epoch=steps_per_epoch, evals=evals, eval_s=eval_s,
                train_s=train_s, fixed_s=fixed_s, time_to_train_s=train_s + fixed_s,
                params=params, note=p.note, topology=asdict(p.topo))


def report(*, preset: str = "abci2019", gpus: int = 2048, batch: int = 81920, epochs: float = 90,
           images_per_gpu_s: Optional[float] = None, budget_bytes: Optional[int] = None,
           plot: Optional[str] = None, json_out: Optional[str] = None) -> str:
    """``yasgd simulate``: the prediction as a text table; optionally a PNG and a JSON file
    (``plot`` / ``json_out`` naming a directory: ``simulate.png`` / ``simulate.json`` in it).
    Every argument is checked before any work."""
    get_preset(preset)
    for name, value, integer in (("--gpus", gpus, True), ("--batch", batch, True),
                                 ("--epochs", epochs, False),
                                 ("--images-per-gpu-s", images_per_gpu_s, False),
                                 ("--budget-bytes", budget_bytes, True)):
        if value is None and name in ("--images-per-gpu-s", "--budget-bytes"):
            continue
        if integer and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise UsageError(f"{name} must be an integer >= 1, got {value!r}")
        if not integer and (isinstance(value, bool) or not isinstance(value, (int, float))
                            or not math.isfinite(value) or value <= 0):
            raise UsageError(f"{name} must be a finite number > 0, got {value!r}")
    plot = _output_file(plot, "--plot", "simulate.png")
    json_out = _output_file(json_out, "--json", "simulate.json")
    from yasgd import simulate_plot
    return simulate_plot.report(preset=preset, gpus=gpus, batch=batch, epochs=epochs,
                                images_per_gpu_s=images_per_gpu_s, budget_bytes=budget_bytes,
                                plot=plot, json_out=json_out)


def _output_file(path: Optional[str], what: str, name: str) -> Optional[str]:
    """The file ``--plot`` / ``--json`` writes: ``path``, or ``path/name`` for a directory;
    UsageError unless it can be written."""
    if path is None:
        return None
    if path == "":
        raise UsageError(f"{what} needs a file or directory name, got ''")
    if os.path.isdir(path):
        path = os.path.join(path, name)
    elif path.endswith(os.sep):
        raise UsageError(f"{what} {path}: directory {path} does not exist")
    parent = os.path.dirname(os.path.abspath(path))
    if os.path.lexists(path) and not os.path.isfile(path):
        raise UsageError(f"{what} {path} exists and is not a regular file")
    if not os.path.isdir(parent):
        raise UsageError(f"{what} {path}: directory {parent} "
                         + ("is not a directory" if os.path.lexists(parent) else "does not exist"))
    if not os.access(parent, os.W_OK | os.X_OK) or (os.path.exists(path)
                                                    and not os.access(path, os.W_OK)):
        raise UsageError(f"{what} {path} is not writable")
    return path
