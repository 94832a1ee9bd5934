"""The systems ``yasgd simulate`` knows (``--preset``), every constant with its public source.

Per-GPU compute (see :mod:`yasgd.simulate.compute`): t(b) = c (h + b). c of each system comes
from a single-node MLPerf Training log of the same software generation (the iteration is the
median epoch over the run's optimizer steps, ``examples/results/mlperf_logs.json`` records what
was read); h, the shape in b, is the fixed cost of a training step in images: the inference h of
the public per-batch table of NVIDIA's MXNet ResNet-50 closest in GPU and software (fp16: V100
mxnet-19.07 for the V100 presets, A100 mxnet-20.12 for H100 and H200) times the ratio of
training h to inference h of the one public pair of per-batch MXNet training and scoring tables
of one build on one GPU (Apache MXNet's performance FAQ, V100, MXNet 1.2.0.rc1). Multi-node runs
set nothing: they are the test.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from yasgd import UsageError
from yasgd.simulate.compute import fixed_cost_images, train_to_infer_h
from yasgd.simulate.network import Topology

GB = 1e9
US = 1e-6

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
# Sinha et al., "Not All GPUs Are Created Equal: Characterizing Variability in Large-Scale,
# Accelerator-Rich Systems", SC'22 (arXiv 2208.11035 v3 abstract): 8 % average performance
# variation (max 22 %) across GPUs of one SKU on V100 clusters (Summit, Vortex, Longhorn).
_GPU_SPREAD = 0.08

# NVIDIA DeepLearningExamples MxNet/Classification/RN50v1.5 README (mxnet-19.07 container),
# inference on DGX-1 V100 16GB, mixed precision, 1 GPU, img/s by batch (data included): the
# per-batch table of NVIDIA's MXNet ResNet-50 on the V100 of the V100 presets. Its least-squares
# line gives their inference h.
V100_INFER = ((1, 397), (2, 732), (4, 1269), (8, 2012), (16, 2667), (32, 3240), (64, 3776),
              (128, 3734), (192, 3641))
# Apache MXNet documentation, "Some Tips for Improving MXNet Performance" (docs/faq/perf.md in
# apache/mxnet, section "Nvidia GPU"; mxnet.apache.org/versions/1.5.0/faq/perf.html), V100 (EC2
# p3.2xlarge), one GPU, MXNet 1.2.0.rc1 with cuDNN 7.0.5, float32, ResNet-50 img/s by batch:
# "Training results" (example/image-classification/train_imagenet.py, mli/mxnet-benchmark
# run_vary_batch.sh) and "Scoring results" (benchmark_score.py). The one public pair of per-batch
# MXNet training and inference tables of one build on one GPU: the same least-squares rule over
# the batches both publish (1 .. 128) gives training h = 10.28 images, scoring h = 6.99, ratio
# 1.47. A training step's fixed cost in images is larger than an inference step's (backward,
# the optimizer update, gradient aggregation per step), which the method assumed away before
# (ratio 1). The same page's K80 and M60 pairs (batches 1 .. 32) give 1.63 and 1.71: the ratio
# is no V100 accident; the V100's, the GPU of the presets' generation and the widest range of
# batches, is the one used (the smallest of the three).
MXNET_FAQ_V100_TRAIN = ((1, 34.54), (2, 65.01), (4, 113.49), (8, 174.81), (16, 251.22),
                        (32, 298.51), (64, 343.19), (128, 363.69))
MXNET_FAQ_V100_SCORE = ((1, 162.15), (2, 293.74), (4, 479.14), (8, 699.39), (16, 947.45),
                        (32, 1076.81), (64, 1168.37), (128, 1233.15), (256, 1155.07))
TRAIN_TO_INFER_H = train_to_infer_h(MXNET_FAQ_V100_TRAIN, MXNET_FAQ_V100_SCORE)
# The same page, K80 (EC2 p2.2xlarge) and M60 (EC2 g3.4xlarge), ResNet-50: the corroborating
# readings of the ratio (docs/simulate.md shows what each would give; the model uses the V100's).
MXNET_FAQ_K80_TRAIN = ((1, 15.61), (2, 23.88), (4, 32.26), (8, 39.42), (16, 46.69), (32, 49.48))
MXNET_FAQ_K80_SCORE = ((1, 67.41), (2, 93.35), (4, 119.18), (8, 131.32), (16, 155.40),
                       (32, 159.42), (64, 167.58), (128, 171.55), (256, 153.01))
MXNET_FAQ_M60_TRAIN = ((1, 20.55), (2, 32.65), (4, 45.57), (8, 54.92), (16, 64.44), (32, 68.34))
MXNET_FAQ_M60_SCORE = ((1, 95.46), (2, 142.61), (4, 182.36), (8, 208.74), (16, 220.73),
                       (32, 230.19), (64, 239.12), (128, 243.31), (256, 242.36))
SHAPE_H_INFER = fixed_cost_images(V100_INFER)
SHAPE_H = SHAPE_H_INFER * TRAIN_TO_INFER_H
# The same README at its February 2021 revision (mxnet-20.12 container), inference on DGX A100
# (1x A100 80GB), mixed precision, img/s by batch: the per-batch table of the newest GPU and the
# newest software of NVIDIA's MXNet ResNet-50 that is published. The H100 and H200 presets take
# their shape from it: their software (NGC 23.04/24.04) is far from mxnet-19.07, and at the one
# software release with two GPUs (20.12: V100 h = 11.3, A100 h = 11.5) h moves with the software,
# not with the GPU.
A100_INFER = ((1, 463), (2, 880), (4, 1668), (8, 2522), (16, 3704), (32, 2964), (64, 4547),
              (128, 5530), (192, 6198), (256, 6120))
SHAPE_H_INFER_A100 = fixed_cost_images(A100_INFER)
SHAPE_H_A100 = SHAPE_H_INFER_A100 * TRAIN_TO_INFER_H


@dataclass(frozen=True)
class SingleNode:
    """A single-node MLPerf log the per-GPU line is set from: the iteration (median epoch /
    optimizer steps per epoch) of ``gpus`` GPUs at ``per_gpu_batch`` images each."""
    mlperf_round: str
    source: str            # repository and results folder
    gpus: int
    per_gpu_batch: int
    iteration_s: float
    # What the same log spends inside run_start..run_stop besides the steady steps (median over
    # its runs; None where the log cannot give it): run_start to the first epoch_start (MLPerf
    # v0.6 on: run_start is logged after initialization, so this is the data pipeline's and the
    # first step's start-up), the first epoch's excess over the median epoch as a fraction of it
    # (warm-up: autotuning, data-cache fill), and one evaluation's time.
    startup_s: Optional[float] = None
    first_epoch_excess: Optional[float] = None
    eval_s: Optional[float] = None


@dataclass(frozen=True)
class Preset:
    title: str
    topo: Topology
    single_node: Tuple[SingleNode, ...]   # one per MLPerf round; the first is the default
    hbm_bw: float                 # B/s
    grad_bytes: int = 2           # fp16 gradients (every preset's MLPerf code trains in float16)
    # LARS with fp32 master weights: read w, m, fp16 g + write w, m, fp16 w (18 B) + norms (4 B)
    update_bytes_per_param: int = 22
    algorithm: str = "hierarchical_tree"
    eval_every: int = 4           # epochs between evaluations (MLPerf rule)
    # "budget" (yasgd's static grouping), "equal" (num_groups equal-bytes groups, MXNet's
    # MXNET_HOROVOD_NUM_GROUPS) or "fujitsu_cubic" (Fujitsu's Horovod)
    grouping: str = "budget"
    num_groups: int = 0
    horovod_cycle_s: float = 0.0  # Horovod background-loop period (a ready group waits cycle/2)
    fusion_copies: int = 0        # fusion-buffer copies per group (in + out), each reads and writes
    nccl_channels: int = 0        # CTAs (one SM each) a running NCCL kernel holds; 0 = not modelled
    sms: int = 0                  # streaming multiprocessors of the GPU
    # published per-batch step-time percentiles of one GPU, (batch, mean, p50, p90) in ms
    latency_curve: Tuple[Tuple[int, float, float, float], ...] = ()
    gpu_spread: float = 0.0       # GPU-to-GPU speed spread of one SKU (full width, fraction)
    shape_h: float = SHAPE_H      # fixed cost of a training step, images
    sources: Tuple[Tuple[str, str], ...] = ()   # (constant, its source) for the docs and --preset list
    note: str = ""


def _simple(gpus_per_node, nvlink_bw, hca_bw, hcas):
    """A topology on NCCL 2.4 (MLPerf v0.6): Simple protocol, tree with its size correction."""
    return Topology(gpus_per_node=gpus_per_node, nvlink_bw=nvlink_bw,
                    nvlink_latency=_NCCL_SIMPLE_NVLINK_STEP, hca_bw=hca_bw, hcas_per_node=hcas,
                    ib_latency=_NCCL_SIMPLE_NET_STEP, ib_tree_latency=_NCCL_SIMPLE_NET_TREE_STEP,
                    call_latency=_NCCL_SIMPLE_CALL, tree_bw_factor=_NCCL_TREE_BW,
                    tree_correction=_NCCL_TREE_CORRECTION_SIMPLE)


def _ll128(gpus_per_node, nvlink_bw, hca_bw, hcas):
    """A topology on NCCL >= 2.5 over NVLink: LL128 latencies, tree bandwidth factor."""
    return Topology(gpus_per_node=gpus_per_node, nvlink_bw=nvlink_bw,
                    nvlink_latency=_NCCL_NVLINK_STEP, hca_bw=hca_bw, hcas_per_node=hcas,
                    ib_latency=_NCCL_NET_STEP, ib_tree_latency=_NCCL_NET_TREE_STEP,
                    call_latency=_NCCL_CALL, tree_bw_factor=_NCCL_TREE_BW)


V05 = "mlcommons/training_results_v0.5"
V06 = "mlcommons/training_results_v0.6"
V07, V10, V11, V20 = (f"mlcommons/training_results_v{r}" for r in ("0.7", "1.0", "1.1", "2.0"))
V21 = "mlcommons/training_results_v2.1"
V30 = "mlcommons/training_results_v3.0"
V31 = "mlcommons/training_results_v3.1"
V40 = "mlcommons/training_results_v4.0"
# Single-node logs (median over the five runs of each run's median epoch, the first epoch left
# out, / ceil(1,281,167 / global batch) optimizer steps per epoch).
# Start-up, first-epoch excess and evaluation from the same logs (mlperf_logs.json, median over
# the runs used). The v0.5 log sets none of the three: its run_start precedes initialization,
# so its start-up is not that of later rounds, and its first-epoch and evaluation stamps are
# left with it (one kind of log sets all three).
DGX1_V05 = SingleNode("v0.5", V05 + " v0.5.0/nvidia/submission/results/dgx1_ngc18.11_mxnet", 8,
                      208, 0.163944)
DGX1_V06 = SingleNode("v0.6", V06 + " NVIDIA/results/dgx1_ngc19.05_mxnet", 8, 208, 0.148288,
                      3.018, 0.0068, 4.214)
DGX2H_V06 = SingleNode("v0.6", V06 + " NVIDIA/results/dgx2h_ngc19.05_mxnet", 16, 208, 0.135042,
                       2.911, 0.2493, 1.6825)
DGXH100_V30 = SingleNode("v3.0", V30 + " NVIDIA/results/dgxh100_ngc23.04_mxnet", 8, 400, 0.056975,
                         0.811, 0.4348, 0.4)
# Recorded after the model's constants and method were fixed, with the multi-node runs of their
# rounds (the held-out cases of ``yasgd.simulate.validate``).
DGXH100_V21 = SingleNode("v2.1", V21 + " NVIDIA/results/dgxh100_preview", 8, 400, 0.060926,
                         0.861, 0.8451, 0.447)
DGXH100_V31 = SingleNode("v3.1", V31 + " NVIDIA/results/eos_ngc23.09_mxnet", 8, 400, 0.056616,
                         2.169, 0.4281, 0.399)
DGXA100_V07 = SingleNode("v0.7", V07 + " NVIDIA/results/dgxa100_ngc20.06_mxnet", 8, 408, 0.144725,
                         2.848, 0.0969, 2.233)
DGXA100_V10 = SingleNode("v1.0", V10 + " NVIDIA/results/dgxa100_ngc21.05_mxnet", 8, 408, 0.1223,
                         0.239, 0.5582, 1.245)
DGXA100_V11 = SingleNode("v1.1", V11 + " NVIDIA/results/dgxa100_ngc21.09_mxnet", 8, 408, 0.123739,
                         0.224, 0.6307, 1.236)
DGXA100_V20 = SingleNode("v2.0", V20 + " NVIDIA/results/dgxa100_ngc22.04_mxnet", 8, 408, 0.119893,
                         0.221, 0.8385, 1.241)
DGXH100_V40 = SingleNode("v4.0", V40 + " NVIDIA/results/eos_ngc24.04_mxnet", 8, 400, 0.055767,
                         0.756, 0.4676, 0.333)
H200_V40 = SingleNode("v4.0", V40 + " NVIDIA/results/h200_ngc24.04_mxnet", 8, 400, 0.050227,
                      0.945, 0.5915, 0.323)

_TRAIN_SRC = ("; x 1.47, training h / inference h of Apache MXNet's performance FAQ "
              "(docs/faq/perf.md, V100, MXNet 1.2.0.rc1, fp32 training and scoring img/s by "
              "batch, the same line over batches 1 to 128)")
_SHAPE_SRC = ("DeepLearningExamples MxNet/Classification/RN50v1.5 README (mxnet-19.07), V100 "
              "fp16 inference img/s by batch: relative least-squares line over its nine batches"
              + _TRAIN_SRC)
_SHAPE_A100_SRC = ("DeepLearningExamples MxNet/Classification/RN50v1.5 README (mxnet-20.12), "
                   "A100 80GB fp16 inference img/s by batch: relative least-squares line over its "
                   "ten batches (the newest GPU and software with a published per-batch table)")
_V06_NVIDIA = ("NVIDIA/benchmarks/resnet/implementations/mxnet/config_DGX*_multi*.sh (MLPerf "
               "v0.6): MXNET_HOROVOD_NUM_GROUPS=16, HOROVOD_CYCLE_TIME=0.1; NCCL 2.4.6 (log's "
               "submission_entry) predates LL128: Simple protocol")
_V3_NVIDIA = ("NVIDIA/benchmarks/resnet/implementations/mxnet/config_DGXA100_common.sh and "
              "config_DGXH100_multi_*.sh (MLPerf v3.0): MXNET_HOROVOD_NUM_GROUPS=1, "
              "HOROVOD_CYCLE_TIME=0.1; NCCL LL128 latencies")
_LOCK_V100 = ("jitter: DeepLearningExamples V100 fp16 inference latency p50/p90 by batch; spread: "
              "Sinha et al., SC'22 (arXiv 2208.11035), V100 clusters")
_LOCK_NONE = "none: no published per-step jitter or GPU-to-GPU spread for this GPU"
_A100_NODE = ("DGX A100 datasheet: 8 x A100 SXM4, NVLink 600 GB/s both directions, 8 x single-port "
              "ConnectX-6 200 Gb/s (HDR) for compute")
_A100_NVIDIA = ("NVIDIA/benchmarks/resnet/implementations/mxnet/config_DGXA100_common.sh and "
                "config_DGXA100_multi_*.sh (MLPerf v0.7 to v2.0): MXNET_HOROVOD_NUM_GROUPS=1, "
                "HOROVOD_CYCLE_TIME=0.1; NCCL LL128 latencies")


def _dgxa100(title, single_node, hbm_gb, hbm_src, shape_note=""):
    """A DGX A100 (40 or 80 GB GPUs): the node, groups and shape that both variants share."""
    logs = ", ".join(f"{s.mlperf_round} {s.source.rsplit('/', 1)[1].replace('_mxnet', '')}"
                     for s in single_node)
    return Preset(
        title=title, topo=_ll128(8, 300 * GB, 25 * GB, 8), single_node=single_node,
        hbm_bw=hbm_gb * GB, grouping="equal", num_groups=1, horovod_cycle_s=0.1e-3,
        fusion_copies=2, shape_h=SHAPE_H_A100,
        sources=(("node", _A100_NODE),
                 ("per-GPU line c", f"single-node DGX A100 logs: {logs} (the first the default)"),
                 ("shape h", _SHAPE_A100_SRC + shape_note + _TRAIN_SRC),
                 ("groups, cycle, NCCL", _A100_NVIDIA),
                 ("lock-step", _LOCK_NONE), ("HBM", hbm_src)))


PRESETS: Dict[str, Preset] = {
    "abci2019": Preset(
        title="ABCI (2019): 4 x V100-SXM2-16GB per node, 2 x InfiniBand EDR",
        topo=_simple(4, 150 * GB, 12.5 * GB, 2),
        # ABCI's GPU is the V100-SXM2-16GB of DGX-1: NVIDIA's single-node DGX-1 log of the
        # latest MLPerf round before a run sets c (the paper's runs, before March 2019: v0.5;
        # Fujitsu's MLPerf v0.6 entry: v0.6).
        single_node=(DGX1_V05, DGX1_V06), hbm_bw=900 * GB,
        # Fujitsu MLPerf v0.6 Horovod (3rdparty/horovod/horovod/common/operations.cc): the cubic
        # groups; HOROVOD_CYCLE_TIME=0.2 (ms, JobScripts/parameters); each group is packed into and
        # unpacked from the fusion buffer by batched_d2d_memcpy (horovod.patch): 2 copies.
        grouping="fujitsu_cubic", horovod_cycle_s=0.2e-3, fusion_copies=2,
        # NCCL_MIN_NRINGS=4 (JobScripts/parameters): at least 4 channels, one CTA each, while a
        # collective runs; V100 has 80 SMs (NVIDIA Tesla V100 datasheet / Volta whitepaper).
        nccl_channels=4, sms=80, latency_curve=_V100_LATENCY, gpu_spread=_GPU_SPREAD,
        sources=(("node", "the paper, arXiv 1903.12650 (ABCI 2019 node: 4 x V100 SXM2, "
                  "2 x EDR HCAs)"),
                 ("NVLink, IB", "V100 SXM2 datasheet (NVLink 300 GB/s both directions); "
                  "InfiniBand EDR 100 Gb/s"),
                 ("NCCL", "NCCL src/graph/tuning.cc, Simple protocol (Fujitsu's NCCL 2.4.2 "
                  "predates LL128), tree factor 0.9 and size correction"),
                 ("per-GPU line c", "single-node DGX-1 log, same GPU, of the latest MLPerf "
                  "round before the run: v0.5 (default, the paper's time) or v0.6"),
                 ("shape h", _SHAPE_SRC),
                 ("groups, cycle, copies, channels", "Fujitsu MLPerf v0.6 JobScripts/parameters "
                  "and Horovod patch: cubic groups 161/3, HOROVOD_CYCLE_TIME=0.2, "
                  "NCCL_MIN_NRINGS=4, 2 fusion copies; V100 80 SMs"),
                 ("lock-step", _LOCK_V100), ("HBM", "V100 SXM2 datasheet: 900 GB/s"))),
    "dgx1": Preset(
        title="DGX-1: 8 x V100-SXM2-16GB per node (NVLink hybrid cube mesh), 4 x InfiniBand EDR",
        topo=_simple(8, 150 * GB, 12.5 * GB, 4),
        single_node=(DGX1_V06,), hbm_bw=900 * GB, grouping="equal", num_groups=16,
        horovod_cycle_s=0.1e-3, fusion_copies=2, latency_curve=_V100_LATENCY,
        gpu_spread=_GPU_SPREAD,
        sources=(("node", "DGX-1 log submission_entry (MLPerf v0.6): 8 x Tesla V100-SXM2-16GB, "
                  "4 x ConnectX-4, InfiniBand 100 Gb/sec (4X EDR)"),
                 ("NVLink", "V100 SXM2 datasheet: 6 links, 300 GB/s both directions"),
                 ("per-GPU line c", "single-node DGX-1 log (v0.6)"), ("shape h", _SHAPE_SRC),
                 ("groups, cycle, NCCL", _V06_NVIDIA), ("lock-step", _LOCK_V100),
                 ("HBM", "V100 SXM2 datasheet: 900 GB/s"))),
    "dgx2h": Preset(
        title="DGX-2H: 16 x V100-SXM3-32GB-H on NVSwitch, 8 x InfiniBand EDR, DGX-2H clocks",
        topo=_simple(16, 150 * GB, 12.5 * GB, 8),
        # A single-node DGX-2H log exists in v0.6 (dgx2h_ngc19.05_mxnet), so no clock ratio is
        # needed: its own GPUs at their own clocks set c.
        single_node=(DGX2H_V06,), hbm_bw=900 * GB, grouping="equal", num_groups=16,
        horovod_cycle_s=0.1e-3, fusion_copies=2, latency_curve=_V100_LATENCY,
        gpu_spread=_GPU_SPREAD,
        sources=(("node", "DGX-2 datasheet: 16 x V100 on NVSwitch (6 NVLinks, 150 GB/s per "
                  "direction per GPU), 8 x 100 Gb/s InfiniBand for compute"),
                 ("per-GPU line c", "single-node DGX-2H log (v0.6): the DGX-2H's own clocks"),
                 ("shape h", _SHAPE_SRC), ("groups, cycle, NCCL", _V06_NVIDIA),
                 ("lock-step", _LOCK_V100 + " (measured on V100 SXM2; placeholder for SXM3-H)"),
                 ("HBM", "V100 datasheet: 900 GB/s"))),
    "dgxa100": _dgxa100("DGX A100: 8 x A100-SXM4-80GB per node (NVLink 3 + NVSwitch), 8 x HDR200",
                        (DGXA100_V20, DGXA100_V11, DGXA100_V10), 2039,
                        "A100 80GB SXM datasheet: 2,039 GB/s"),
    "dgxa100_40gb": _dgxa100("DGX A100 (40 GB): 8 x A100-SXM4-40GB per node (NVLink 3 + NVSwitch), "
                             "8 x HDR200", (DGXA100_V07,), 1555,
                             "A100 40GB SXM datasheet: 1,555 GB/s",
                             ", carried to the 40 GB A100 (stated)"),
    "dgxh100": Preset(
        title="DGX H100: 8 x H100-SXM5-80GB per node (NVLink 4 + NVSwitch), 8 x NDR400",
        topo=_ll128(8, 450 * GB, 50 * GB, 8),
        single_node=(DGXH100_V40, DGXH100_V31, DGXH100_V30, DGXH100_V21), hbm_bw=3350 * GB,
        grouping="equal", num_groups=1, horovod_cycle_s=0.1e-3, fusion_copies=2,
        shape_h=SHAPE_H_A100,
        sources=(("node", "DGX H100 datasheet: 8 x H100 SXM5, NVLink 900 GB/s both directions, "
                  "8 x ConnectX-7 400 Gb/s (NDR400)"),
                 ("per-GPU line c", "single-node DGX H100 logs: v4.0 eos_ngc24.04 (default), "
                  "v3.1 eos_ngc23.09, v3.0 dgxh100_ngc23.04, v2.1 dgxh100_preview"),
                 ("shape h", _SHAPE_A100_SRC + ", carried to H100 (stated)" + _TRAIN_SRC),
                 ("groups, cycle, NCCL", _V3_NVIDIA), ("lock-step", _LOCK_NONE),
                 ("HBM", "H100 SXM5 datasheet: 3.35 TB/s"))),
    "abci3": Preset(
        title="ABCI 3.0: 8 x H200-SXM-141GB per node, 8 x InfiniBand NDR200",
        topo=_ll128(8, 450 * GB, 25 * GB, 8),
        single_node=(H200_V40,), hbm_bw=4800 * GB,
        # yasgd's own static groups on stock Horovod 0.28: default cycle 1 ms since Horovod 0.21.0
        # ("Changed default cycle time from 5ms to 1ms"), batched fusion copies.
        horovod_cycle_s=1e-3, fusion_copies=2, shape_h=SHAPE_H_A100,
        sources=(("node", "ABCI 3.0 (Takano et al., AIST, 2024): 8 x H200 SXM, 8 x InfiniBand "
                  "NDR200 (ConnectX-7) per node; H200 datasheet: NVLink 900 GB/s both directions"),
                 ("per-GPU line c", "single-node 8 x H200 log (v4.0, h200_ngc24.04_mxnet)"),
                 ("shape h", _SHAPE_A100_SRC + ", carried to H200 (stated)" + _TRAIN_SRC),
                 ("groups, cycle", "yasgd's comm.group_budget_bytes (4 MiB) on stock Horovod "
                  "(default cycle 1 ms since 0.21.0)"), ("lock-step", _LOCK_NONE),
                 ("HBM", "H200 datasheet: 4.8 TB/s"))),
}


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise UsageError(f"argument --preset: must be one of {', '.join(PRESETS)} (or list), "
                         f"got {name!r}")
    return PRESETS[name]


def single_node(preset: Preset, mlperf_round: str = None) -> SingleNode:
    """The preset's single-node log of that MLPerf round (default: its first)."""
    if mlperf_round is None:
        return preset.single_node[0]
    for s in preset.single_node:
        if s.mlperf_round == mlperf_round:
            return s
    raise UsageError(f"no single-node log of MLPerf {mlperf_round} in this preset; one of "
                     f"{', '.join(s.mlperf_round for s in preset.single_node)}")
