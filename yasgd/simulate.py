"""Scaling model of synchronous data-parallel ResNet-50 training (``yasgd simulate``).

One iteration on every GPU (all GPUs identical, no stragglers, data loading hidden):

    forward  t_f = C/3,  backward t_b = 2C/3   (backward ~ 2x forward FLOPs: input and weight grads)
    C + t_u = b / X(b)                         (X: published per-GPU training img/s, t_u: optimizer
                                                update, HBM-bound, runs after the last allreduce)
    gradient tensor i is ready at t_f + t_b * (conv/fc MACs of layers reduced so far) / (all MACs)
    groups (yasgd's static grouping, backward order): ready_g = ready of its last tensor
    one communication channel:  start_g = max(ready_g, end_{g-1}),  end_g = start_g + T(bytes_g)
    iteration = max(t_f + t_b, end_last) + t_u          (never shorter than compute)

Allreduce cost T (alpha-beta model, Thakur, Rabenseifner & Gropp 2005):
    ring over n:     2(n-1)/n * S / bw + 2(n-1) * alpha
    hierarchical:    intra-node reduce-scatter (NVLink) + inter-node allreduce of the node's
                     S bytes over its HCAs aggregated + intra-node allgather; inter-node "ring"
                     (2(p-1) alpha) or "tree" (halving-doubling / NCCL double tree, 2 log2(p)
                     alpha); the presets use the tree (Preset.algorithm), the table shows all
Every call also pays NCCL's fixed per-collective latency. Units: bytes, seconds, bytes/s.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from yasgd import UsageError

IMAGENET_TRAIN = 1_281_167      # ILSVRC-2012 training images
IMAGENET_VAL = 50_000           # ILSVRC-2012 validation images
DEFAULT_BUDGET = 4 << 20        # = yasgd.config.CommCfg.group_budget_bytes (test pins it)
ALGORITHMS = ("ring", "hierarchical", "hierarchical_tree")
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
    else:
        inter = tree_allreduce_time(nbytes, nodes, node_bw, topo.ib_tree_latency)
    return topo.call_latency + 2 * intra + inter

# ---------------------------------------------------------------- presets (see docs/simulate.md)


@dataclass(frozen=True)
class Preset:
    topo: Topology
    images_per_gpu_s: float       # published single-GPU training img/s at ref_batch
    ref_batch: int
    infer_curve: Tuple[Tuple[int, float], ...]   # published inference img/s by batch (same GPU)
    hbm_bw: float                 # B/s
    grad_bytes: int = 2           # fp16 gradients (float16 training, Fujitsu MLPerf v0.6 recipe)
    # LARS with fp32 master weights: read w, m, fp16 g + write w, m, fp16 w (18 B) + norms (4 B)
    update_bytes_per_param: int = 22
    # NCCL reduce-scatter in the node, NCCL allreduce across nodes, NCCL allgather: the 2-stage
    # allreduce of Fujitsu's MLPerf v0.6 code (HOROVOD_ALLREDUCE_MODE=1, "hierarchical on GPU");
    # NCCL >= 2.4 runs the cross-node allreduce as a double binary tree at this scale.
    algorithm: str = "hierarchical_tree"
    eval_every: int = 4           # epochs between evaluations (MLPerf rule, Fujitsu v0.6 recipe)
    epoch_fixed_s: float = 0.0    # per-epoch loader restart etc.: no public figure, so 0 (explicit)
    note: str = ""


# Latencies from NCCL's own cost model, src/graph/tuning.cc (NCCL 2.7, github.com/NVIDIA/nccl):
# per-step hwLat Ring/LL128: NVLink 1.9 us, network 4.0 us; Tree/LL128 network 8.5 us per level;
# baseLat Ring/LL128 10.0 us per call. LL128 is NCCL's default protocol on Volta/Hopper + NVLink.
_NCCL_NVLINK_STEP = 1.9 * US
_NCCL_NET_STEP = 4.0 * US
_NCCL_NET_TREE_STEP = 8.5 * US
_NCCL_CALL = 10.0 * US

PRESETS: Dict[str, Preset] = {
    "abci2019": Preset(
        topo=Topology(
            gpus_per_node=4,                 # ABCI node (2018-): 4x Tesla V100 SXM2 (paper.md)
            nvlink_bw=150 * GB,              # V100 SXM2 datasheet: NVLink 300 GB/s, both directions
            nvlink_latency=_NCCL_NVLINK_STEP,
            hca_bw=12.5 * GB,                # InfiniBand EDR 100 Gb/s (Mellanox ConnectX-4/5 brief)
            hcas_per_node=2,                 # ABCI node: 2x InfiniBand EDR HCAs (paper.md)
            ib_latency=_NCCL_NET_STEP, ib_tree_latency=_NCCL_NET_TREE_STEP,
            call_latency=_NCCL_CALL),
        # NVIDIA DeepLearningExamples MxNet/Classification/RN50v1.5 README, mxnet-19.07 container,
        # DGX-1 V100 16GB, 1 GPU, mixed precision, batch 192: 1,427 img/s (training, data included).
        images_per_gpu_s=1427.0, ref_batch=192,
        # Same README, inference V100 16GB mixed precision img/s by batch (small-batch efficiency).
        infer_curve=((1, 397), (2, 732), (4, 1269), (8, 2012), (16, 2667), (32, 3240),
                     (64, 3776), (128, 3734), (192, 3641)),
        hbm_bw=900 * GB),                    # V100 SXM2 datasheet: HBM2 900 GB/s
    "abci3": Preset(
        topo=Topology(
            gpus_per_node=8,                 # ABCI 3.0: 8x H200 SXM per node (Takano et al. 2024)
            nvlink_bw=450 * GB,              # H200 datasheet: NVLink 900 GB/s both directions
            nvlink_latency=_NCCL_NVLINK_STEP,
            hca_bw=25 * GB,                  # InfiniBand NDR200: 200 Gb/s per HCA (ConnectX-7)
            hcas_per_node=8,                 # ABCI 3.0: 8x NDR200 per node (same paper)
            ib_latency=_NCCL_NET_STEP, ib_tree_latency=_NCCL_NET_TREE_STEP,
            call_latency=_NCCL_CALL),
        # No public MXNet ResNet-50 training figure exists for H200: the nearest published one is
        # DeepLearningExamples RN50v1.5 MXNet, mxnet-20.12, DGX A100 80GB, 1 GPU, mixed, batch 256:
        # 2,180 img/s. Used as a stated floor; pass --images-per-gpu-s to override.
        images_per_gpu_s=2180.0, ref_batch=256,
        infer_curve=((1, 463), (2, 880), (4, 1668), (8, 2522), (16, 3704), (32, 2964),
                     (64, 4547), (128, 5530), (192, 6198), (256, 6120)),   # same README, A100
        hbm_bw=4800 * GB,                    # H200 datasheet: HBM3e 4.8 TB/s
        note="per-GPU compute: A100's published figure, no public H200 MXNet number"),
}


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise UsageError(f"unknown preset {name!r}; one of {', '.join(PRESETS)}")
    return PRESETS[name]


def per_gpu_throughput(preset: Preset, per_gpu_batch: int) -> float:
    """X(b) = X(ref) * min(1, I*(b) / I*(ref)), I* the running maximum of the published inference
    curve (linear between points): a GPU runs small batches as much less efficiently in training as
    in inference. Assumption, not a measurement of training at small batch."""
    pts = list(preset.infer_curve)
    env, best = [], 0.0
    for b, v in pts:
        best = max(best, v)
        env.append((b, best))

    def at(b: float) -> float:
        if b <= env[0][0]:
            return env[0][1] * b / env[0][0]
        for (b0, v0), (b1, v1) in zip(env, env[1:]):
            if b <= b1:
                return v0 + (v1 - v0) * (b - b0) / (b1 - b0)
        return env[-1][1]
    return preset.images_per_gpu_s * min(1.0, at(per_gpu_batch) / at(preset.ref_batch))

# ---------------------------------------------------------------- the iteration model


def iteration(*, gpus: int, per_gpu_batch: int, images_per_gpu_s: float, topo: Topology,
              algorithm: str, budget_bytes: int, grad_bytes: int, update_s: float) -> Dict:
    """One synchronous step: timeline of backward, grouped allreduces and the update (seconds)."""
    step = per_gpu_batch / images_per_gpu_s
    compute = max(step - update_s, 0.0)
    t_f, t_b = compute / 3.0, 2.0 * compute / 3.0
    tensors = backward_tensors()
    sizes = [n * grad_bytes for _, n, _ in tensors]
    total_macs = sum(m for _, _, m in tensors)
    ready, acc = [], 0
    for _, _, m in tensors:
        acc += m
        ready.append(t_f + t_b * acc / total_macs)
    end, comm = t_f, 0.0
    bounds = _group_bounds(sizes, budget_bytes)
    for a, b in bounds:
        cost = allreduce_time(sum(sizes[a:b]), gpus, topo, algorithm)
        end = max(ready[b - 1], end) + cost
        comm += cost
    it = max(t_f + t_b, end) + update_s
    return {"iteration_s": it, "compute_s": t_f + t_b, "forward_s": t_f, "backward_s": t_b,
            "update_s": update_s, "comm_s": comm, "exposed_comm_s": it - step,
            "groups": len(bounds), "grad_bytes": sum(sizes)}


def predict(*, preset: str = "abci2019", gpus: int = 2048, batch: int = 81920,
            epochs: float = 90, images_per_gpu_s: Optional[float] = None,
            budget_bytes: Optional[int] = None, algorithm: Optional[str] = None) -> Dict:
    """Iteration time, images/s, scaling efficiency (vs. N x one GPU at the same per-GPU batch)
    and time to train ``epochs`` epochs of ImageNet-1k, as a dict."""
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
    budget = DEFAULT_BUDGET if budget_bytes is None else budget_bytes
    if budget <= 0:
        raise UsageError(f"--budget-bytes must be > 0, got {budget}")
    kw = dict(per_gpu_batch=b, images_per_gpu_s=x, topo=p.topo,
              algorithm=algorithm or p.algorithm, grad_bytes=p.grad_bytes, budget_bytes=budget,
              update_s=params * p.update_bytes_per_param / p.hbm_bw)
    it = iteration(gpus=gpus, **kw)
    one = iteration(gpus=1, **kw)
    ips = batch / it["iteration_s"]
    steps_per_epoch = math.ceil(IMAGENET_TRAIN / batch)      # the loader pads the last batch
    evals = math.floor(epochs / p.eval_every) if p.eval_every else 0
    n_val = math.ceil(IMAGENET_VAL / gpus)           # evaluation: forward only, C/3 per image
    eval_s = n_val / (3 * per_gpu_throughput(p, n_val)) * per_gpu_throughput(p, b) / x \
        + allreduce_time(8, gpus, p.topo, "hierarchical_tree")   # + reducing the correct count
    train_s = epochs * steps_per_epoch * it["iteration_s"]
    fixed_s = evals * eval_s + math.ceil(epochs) * p.epoch_fixed_s
    return dict(preset=preset, gpus=gpus, nodes=math.ceil(gpus / p.topo.gpus_per_node),
                batch=batch, per_gpu_batch=b, epochs=epochs, algorithm=kw["algorithm"],
                budget_bytes=kw["budget_bytes"], images_per_gpu_s_compute=x, **it,
                images_per_s=ips, images_per_s_per_gpu=ips / gpus,
                efficiency=ips / (gpus * b / one["iteration_s"]),
                steps_per_epoch=steps_per_epoch, evals=evals, eval_s=eval_s,
                train_s=train_s, fixed_s=fixed_s, time_to_train_s=train_s + fixed_s,
                params=params, note=p.note, topology=asdict(p.topo))


def report(*, preset: str = "abci2019", gpus: int = 2048, batch: int = 81920, epochs: float = 90,
           images_per_gpu_s: Optional[float] = None, budget_bytes: Optional[int] = None,
           plot: Optional[str] = None, json_out: Optional[str] = None) -> str:
    """``yasgd simulate``: the prediction as a text table; optionally a PNG and a JSON file."""
    from yasgd import simulate_plot
    return simulate_plot.report(preset=preset, gpus=gpus, batch=batch, epochs=epochs,
                                images_per_gpu_s=images_per_gpu_s, budget_bytes=budget_bytes,
                                plot=plot, json_out=json_out)
