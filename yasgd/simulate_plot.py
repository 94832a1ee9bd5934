"""Output side of ``yasgd simulate``: the text table, the sweeps, the PNG and the JSON.

The model itself is in :mod:`yasgd.simulate`; nothing here changes a number.
"""
from __future__ import annotations

import json
from typing import Dict, List, Optional

from yasgd import simulate as sim

# Yamazaki et al., arXiv 1903.12650 (paper.md): 2,048 V100, batch 81,920, ~90 epochs.
PAPER = {"gpus": 2048, "batch": 81920, "epochs": 90, "images_per_s": 1.73e6,
         "time_to_train_s": 74.7, "efficiency": 0.77}
GPU_SWEEP = [2 ** k for k in range(13)]                 # 1 .. 4096
BUDGET_SWEEP = [(64 << 10) * 2 ** k for k in range(13)]  # 64 KiB .. 256 MiB


def _si(x: float) -> str:
    return f"{x / 1e6:.3f} M" if x >= 1e6 else f"{x:,.0f}"


def _bytes(n: float) -> str:
    for unit, k in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << k:
            return f"{n / (1 << k):g} {unit}"
    return f"{n:g} B"


def sweeps(*, preset: str, gpus: int, batch: int, epochs: float,
           images_per_gpu_s: Optional[float], budget_bytes: Optional[int]) -> Dict:
    """Efficiency against GPU count (same per-GPU batch) and against the group budget."""
    b = batch // gpus
    out: Dict[str, Dict] = {"gpus": {}, "budget": {}}
    for alg in sim.ALGORITHMS:
        out["gpus"][alg] = [sim.predict(preset=preset, gpus=n, batch=b * n, epochs=epochs,
                                        images_per_gpu_s=images_per_gpu_s,
                                        budget_bytes=budget_bytes, algorithm=alg)["efficiency"]
                            for n in GPU_SWEEP]
        out["budget"][alg] = [sim.predict(preset=preset, gpus=gpus, batch=batch, epochs=epochs,
                                          images_per_gpu_s=images_per_gpu_s, budget_bytes=bb,
                                          algorithm=alg)["efficiency"]
                              for bb in BUDGET_SWEEP]
    return {"gpu_counts": GPU_SWEEP, "budgets": BUDGET_SWEEP, "per_gpu_batch": b, **out}


def plot_png(path: str, sw: Dict, *, preset: str, gpus: int, budget: Optional[int]) -> None:
    """``budget``: the group budget of the GPU sweep, None where it uses the preset's groups."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, c) = plt.subplots(1, 2, figsize=(11, 4.2))
    for alg in sim.ALGORITHMS:
        a.plot(sw["gpu_counts"], sw["gpus"][alg], marker="o", ms=3, label=alg)
        c.plot(sw["budgets"], sw["budget"][alg], marker="o", ms=3, label=alg)
    a.set(xscale="log", xlabel="GPUs", ylabel="scaling efficiency", ylim=(0, 1.05),
          title=f"{preset}: {sw['per_gpu_batch']} images/GPU, "
          + (f"budget {_bytes(budget)}" if budget else "preset's groups"))
    a.set_xscale("log", base=2)
    c.set(xlabel="group budget (bytes)", ylim=(0, 1.05), title=f"{preset}: {gpus} GPUs")
    c.set_xscale("log", base=2)
    c.set_xticks(sw["budgets"][::2], [_bytes(x).replace(" ", "") for x in sw["budgets"][::2]])
    if budget:
        c.axvline(budget, color="grey", ls=":", lw=1)
    for ax in (a, c):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(*, preset: str, gpus: int, batch: int, epochs: float,
           images_per_gpu_s: Optional[float], budget_bytes: Optional[int],
           plot: Optional[str], json_out: Optional[str]) -> str:
    kw = dict(preset=preset, gpus=gpus, batch=batch, epochs=epochs,
              images_per_gpu_s=images_per_gpu_s, budget_bytes=budget_bytes)
    head = sim.predict(**kw)
    rows = {alg: sim.predict(algorithm=alg, **kw) for alg in sim.ALGORITHMS}
    t = head["topology"]
    if head["grouping"] == "fujitsu_cubic":
        grouping = (f"Fujitsu's cubic groups + fp32 BN tail (Horovod, MLPerf v0.6) -> "
                    f"{head['groups']} collectives")
    else:
        grouping = f"budget {_bytes(head['budget_bytes'])} -> {head['groups']} groups"
    tree = f"tree {t['ib_tree_latency'] * 1e6:g} us/level"
    if t["tree_bw_factor"] != 1.0 or t["tree_correction"]:
        tree += f" x{t['tree_bw_factor']:g} bw" + (" x size correction" if t["tree_correction"]
                                                   else "")
    lines = [
        f"yasgd simulate: ResNet-50 v1.5, {head['params']:,} parameters, "
        f"{head['grad_bytes'] / 1e6:.1f} MB of gradients per step; preset {preset}"
        + (f" ({head['note']})" if head["note"] else ""),
        f"topology: {head['nodes']} node(s) x {t['gpus_per_node']} GPUs; NVLink "
        f"{t['nvlink_bw'] / 1e9:g} GB/s/GPU, {t['nvlink_latency'] * 1e6:g} us/step; IB "
        f"{t['hcas_per_node']} x {t['hca_bw'] / 1e9:g} GB/s/node, ring {t['ib_latency'] * 1e6:g} "
        f"us/step, {tree}; {t['call_latency'] * 1e6:g} us/call",
        f"per GPU: batch {head['per_gpu_batch']}, compute {head['images_per_gpu_s_compute']:,.0f} "
        + ("img/s alone (given; " if head["compute_given"] else
           f"img/s alone (fixed cost of a step = {head['train_fixed_cost_batch']:.1f} images; ")
        + f"at lock-step: forward {head['forward_s'] * 1e3:.2f} ms, "
        f"backward {head['backward_s'] * 1e3:.2f} ms;"
        f" update {head['update_s'] * 1e3:.2f} ms); {grouping}",
        f"lock-step over {gpus} GPUs: compute x{head['lockstep']:.3f} (step-time jitter "
        f"{head['step_cv']:.1%}, GPU spread {head['gpu_spread']:.0%}); Horovod cycle "
        f"{head['horovod_cycle_s'] * 1e3:g} ms, {head['fusion_copies']} fusion copies/group; NCCL "
        + (f"{head['nccl_channels']} channels of {head['sms']} SMs" if head["sms"]
           else "SM share not modelled"),
        "",
        f"{'algorithm':<20}{'iter ms':>9}{'comm ms':>9}{'exposed':>9}{'images/s':>12}"
        f"{'img/s/GPU':>11}{'effic.':>8}{'time to train':>15}",
    ]
    for alg, r in rows.items():
        mark = " *" if alg == head["algorithm"] else ""
        lines.append(f"{alg + mark:<20}{r['iteration_s'] * 1e3:>9.2f}{r['comm_s'] * 1e3:>9.2f}"
                     f"{r['exposed_comm_s'] * 1e3:>9.2f}{_si(r['images_per_s']):>12}"
                     f"{r['images_per_s_per_gpu']:>11,.0f}{r['efficiency']:>8.1%}"
                     f"{r['time_to_train_s']:>13.1f} s")
    paper = None
    if preset == "abci2019" and gpus == PAPER["gpus"] and batch == PAPER["batch"]:
        paper = dict(PAPER)
        lines.append(f"{'paper 1903.12650':<20}{'':>27}{_si(paper['images_per_s']):>12}"
                     f"{paper['images_per_s'] / gpus:>11,.0f}{paper['efficiency']:>8.0%}"
                     f"{paper['time_to_train_s']:>13.1f} s")
    lines += ["", f"* preset's algorithm. {epochs:g} epochs = {head['steps_per_epoch']} "
              f"steps/epoch (last batch padded) + {head['evals']} evaluations of "
              f"{head['eval_s'] * 1e3:.1f} ms; "
              f"fixed per-epoch cost {head['fixed_s'] - head['evals'] * head['eval_s']:.1f} s."]
    if paper:
        for alg, r in rows.items():
            dt = r["time_to_train_s"] / paper["time_to_train_s"] - 1
            lines.append(f"vs paper, {alg}: throughput "
                         f"{r['images_per_s'] / paper['images_per_s'] - 1:+.1%}, time "
                         + (f"{dt:+.1%}" if epochs == paper["epochs"] else "n/a (epochs differ)"))
    sw = None
    if plot or json_out:
        sw = sweeps(**kw)
    if plot:
        plot_png(plot, sw, preset=preset, gpus=gpus, budget=head["budget_bytes"])
        lines.append(f"plot: {plot}")
    if json_out:
        with open(json_out, "w") as f:
            json.dump({"prediction": head, "algorithms": rows, "paper": paper, "sweeps": sw},
                      f, indent=1)
        lines.append(f"json: {json_out}")
    return "\n".join(lines)
