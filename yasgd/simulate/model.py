"""The iteration model of ``yasgd simulate`` and its prediction for a job.

One iteration (all GPUs run the same program; data loading is inside the measured step):

    C + t_u = t(b)                             (t: per-GPU step time, yasgd.simulate.compute;
                                                t_u: optimizer update, HBM-bound, after the last
                                                allreduce)
    forward  t_f = C/3,  backward t_b = 2C/3   (backward ~ 2x forward FLOPs: input and weight grads)
    lock-step: on N > 1 GPUs every rank waits for the slowest, C -> C * L(N)
    gradient tensor i is ready once backward has done t_b * (conv/fc MACs so far) / (all MACs)
    groups: the preset's (budget, equal-bytes or Fujitsu's cubic groups); ready_g = ready of its
            last tensor
    one communication channel: start_g = end_{g-1} if the group was ready before, otherwise
            ready_g + cycle/2 (the Horovod background loop polls every cycle);
            end_g = start_g + T(bytes_g) + fusion-buffer copies
    while a collective runs, backward runs on the SMs NCCL leaves free (rate 1 - channels/SMs)
    iteration = max(end of backward, end_last) + t_u            (never shorter than compute)
"""
from __future__ import annotations

import math
from dataclasses import asdict
from typing import Dict, Optional, Sequence, Tuple

from yasgd import UsageError
from yasgd.grouping import DEFAULT_BUDGET_BYTES
from yasgd.simulate import compute
from yasgd.simulate.network import (Topology, allreduce_time, backward_tensors,
                                    fujitsu_cubic_groups, grouped, layer_of)
from yasgd.simulate.presets import Preset, get_preset, single_node

IMAGENET_TRAIN = 1_281_167      # ILSVRC-2012 training images
# past this, a run is no training schedule anyone plans (ImageNet recipes run up to a few
# hundred epochs) and the times overflow what the report prints
MAX_EPOCHS = 10_000
IMAGENET_VAL = 50_000           # ILSVRC-2012 validation images
DEFAULT_BUDGET = DEFAULT_BUDGET_BYTES
GROUPINGS = ("budget", "equal", "fujitsu_cubic")


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
        groups = grouped(sizes, budget_bytes, layers=[layer_of(name) for name, _, _ in tensors])
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




def update_s(p: Preset) -> float:
    """t_u: the LARS update streams every parameter's bytes through HBM once."""
    return sum(n for _, n, _ in backward_tensors()) * p.update_bytes_per_param / p.hbm_bw


def lockstep(p: Preset, gpus: int, per_gpu_batch: float) -> float:
    """L(N) of the preset at this per-GPU batch (1 on one GPU or without sourced figures)."""
    return compute.lockstep_factor(gpus, compute.step_cv(p.latency_curve, per_gpu_batch),
                                   p.gpu_spread)


def per_image_s(p: Preset, mlperf_round: Optional[str] = None) -> float:
    """c of the preset: its single-node log's iteration over L(g) (h + b) (compute.per_image_cost)."""
    s = single_node(p, mlperf_round)
    return compute.per_image_cost(s.iteration_s, s.per_gpu_batch, p.shape_h,
                                  lockstep(p, s.gpus, s.per_gpu_batch))


def per_gpu_throughput(p: Preset, per_gpu_batch: float, mlperf_round: Optional[str] = None
                       ) -> float:
    """X(b) = b / t(b) of one GPU alone, images/s."""
    return per_gpu_batch / compute.step_time(per_gpu_batch, per_image_s(p, mlperf_round),
                                             p.shape_h)


def predict(*, preset: str = "abci2019", gpus: int = 2048, batch: int = 81920,
            epochs: float = 90, images_per_gpu_s: Optional[float] = None,
            budget_bytes: Optional[int] = None, algorithm: Optional[str] = None,
            num_groups: Optional[int] = None, mlperf_round: Optional[str] = None,
            evals: Optional[int] = None, software_round: Optional[str] = None) -> Dict:
    """Iteration time, images/s, scaling efficiency (vs. N x one GPU at the same per-GPU batch)
    and time to train ``epochs`` epochs of ImageNet-1k, as a dict. Without ``budget_bytes`` or
    ``num_groups`` the preset's grouping is used. ``mlperf_round`` picks the single-node log
    (default: the preset's first); ``evals`` the number of evaluations (default: every
    ``eval_every`` epochs); ``software_round`` the single-node log that sets the per-GPU line
    where the run's software is of another round's generation (default: ``mlperf_round``'s).
    Start-up, first-epoch excess and evaluation time come from ``mlperf_round``'s log (its rules
    say where run_start is logged)."""
    p = get_preset(preset)
    if gpus < 1:
        raise UsageError(f"--gpus must be >= 1, got {gpus}")
    if batch < 1 or batch % gpus:
        raise UsageError(f"--batch {batch} is not divisible by --gpus {gpus}")
    if batch > IMAGENET_TRAIN:
        raise UsageError(f"--batch {batch} is more than the {IMAGENET_TRAIN:,} images of "
                         "ImageNet-1k's training set, the epoch the model times")
    if not 0 < epochs <= MAX_EPOCHS:
        raise UsageError(f"--epochs must be in (0, {MAX_EPOCHS}], got {epochs}")
    b = batch // gpus
    sw_round = software_round or mlperf_round
    c = per_image_s(p, sw_round)
    x = images_per_gpu_s if images_per_gpu_s is not None else b / compute.step_time(b, c, p.shape_h)
    if x <= 0:
        raise UsageError(f"--images-per-gpu-s must be > 0, got {x}")
    if budget_bytes is not None and budget_bytes <= 0:
        raise UsageError(f"--budget-bytes must be > 0, got {budget_bytes}")
    grouping = ("budget" if budget_bytes is not None else
                "equal" if num_groups else p.grouping)
    ngroups = num_groups or p.num_groups
    budget = (budget_bytes or DEFAULT_BUDGET) if grouping == "budget" else None
    sizes = [n * p.grad_bytes for _, n, _ in backward_tensors()]
    groups = (fujitsu_cubic_groups(p.grad_bytes) if grouping == "fujitsu_cubic" else
              grouped(sizes, num_groups=ngroups) if grouping == "equal" else None)
    cv = compute.step_cv(p.latency_curve, b)
    lock = compute.lockstep_factor(gpus, cv, p.gpu_spread)
    kw = dict(per_gpu_batch=b, images_per_gpu_s=x, topo=p.topo,
              algorithm=algorithm or p.algorithm, grad_bytes=p.grad_bytes,
              budget_bytes=budget or DEFAULT_BUDGET, groups=groups, update_s=update_s(p),
              cycle_s=p.horovod_cycle_s, copy_s_per_byte=2.0 * p.fusion_copies / p.hbm_bw,
              sm_share=p.nccl_channels / p.sms if p.sms else 0.0)
    it = iteration(gpus=gpus, lockstep=lock, **kw)
    one = iteration(gpus=1, **kw)
    ips = batch / it["iteration_s"]
    steps_per_epoch = math.ceil(IMAGENET_TRAIN / batch)      # the loader pads the last batch
    n_evals = evals if evals is not None else (
        math.floor(epochs / p.eval_every) if p.eval_every else 0)
    s = single_node(p, sw_round)
    o = single_node(p, mlperf_round)       # the log of the run's round: start-up, warm-up, eval
    n_val = math.ceil(IMAGENET_VAL / gpus)
    if o.eval_s is not None:   # the log's evaluation, per validation image of one GPU, at L(N)
        eval_s = (o.eval_s * n_val / math.ceil(IMAGENET_VAL / o.gpus)
                  * lock / lockstep(p, o.gpus, o.per_gpu_batch))
    else:                      # forward only, a third of a step at that batch
        fwd = (compute.step_time(n_val, c, p.shape_h) if images_per_gpu_s is None
               else n_val / x)
        eval_s = fwd / 3 * lock
    eval_s += allreduce_time(8, gpus, p.topo, "hierarchical_tree")
    train_s = epochs * steps_per_epoch * it["iteration_s"]
    startup_s = o.startup_s or 0.0
    warmup_s = (o.first_epoch_excess or 0.0) * steps_per_epoch * it["iteration_s"]
    fixed_s = n_evals * eval_s + startup_s + warmup_s
    return dict(preset=preset, gpus=gpus, nodes=math.ceil(gpus / p.topo.gpus_per_node),
                batch=batch, per_gpu_batch=b, epochs=epochs, algorithm=kw["algorithm"],
                grouping=grouping, budget_bytes=budget, num_groups=ngroups,
                images_per_gpu_s_compute=x, compute_given=images_per_gpu_s is not None,
                shape_h=p.shape_h, per_image_s=c, mlperf_round=o.mlperf_round,
                software_round=s.mlperf_round,
                single_node_source=s.source, **it,
                lockstep=lock, step_cv=cv, gpu_spread=p.gpu_spread,
                horovod_cycle_s=p.horovod_cycle_s, fusion_copies=p.fusion_copies,
                nccl_channels=p.nccl_channels, sms=p.sms,
                images_per_s=ips, images_per_s_per_gpu=ips / gpus,
                efficiency=ips / (gpus * b / one["iteration_s"]),
                steps_per_epoch=steps_per_epoch, evals=n_evals, eval_s=eval_s,
                train_s=train_s, startup_s=startup_s, warmup_s=warmup_s, fixed_s=fixed_s,
                time_to_train_s=train_s + fixed_s,
                params=sum(n for _, n, _ in backward_tensors()), note=p.note,
                title=p.title, topology=asdict(p.topo))
