"""Sweeps and the PNG of ``yasgd simulate --plot`` (efficiency against GPUs and group budget).

Nothing here changes a number: it calls :func:`yasgd.simulate.model.predict`.
"""
from __future__ import annotations

from typing import Dict, Optional

from yasgd import outputs
from yasgd.simulate import model as sim
from yasgd.simulate.network import ALGORITHMS

GPU_SWEEP = [2 ** k for k in range(13)]                 # 1 .. 4096
BUDGET_SWEEP = [(64 << 10) * 2 ** k for k in range(13)]  # 64 KiB .. 256 MiB


def _bytes(n: float) -> str:
    for unit, k in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << k:
            return f"{n / (1 << k):g} {unit}"
    return f"{n:g} B"


def sweeps(*, preset: str, gpus: int, batch: int, epochs: float,
           images_per_gpu_s: Optional[float], budget_bytes: Optional[int]) -> Dict:
    """Efficiency against GPU count (same per-GPU batch) and against the group budget.

    The GPU sweep holds the counts of :data:`GPU_SWEEP` whose global batch (the per-GPU batch
    times the count) is one epoch of ImageNet-1k at most, as the model times no other:
    ``gpu_counts`` are those it holds, ``gpu_counts_left_out`` the others, ``max_gpus`` the
    most GPUs that batch can be spread over (``gpus`` itself and every count up to it fit)."""
    b = batch // gpus
    max_gpus = sim.IMAGENET_TRAIN // b
    counts = [n for n in GPU_SWEEP if n <= max_gpus]
    out: Dict[str, Dict] = {"gpus": {}, "budget": {}}
    for alg in ALGORITHMS:
        out["gpus"][alg] = [sim.predict(preset=preset, gpus=n, batch=b * n, epochs=epochs,
                                        images_per_gpu_s=images_per_gpu_s,
                                        budget_bytes=budget_bytes, algorithm=alg)["efficiency"]
                            for n in counts]
        out["budget"][alg] = [sim.predict(preset=preset, gpus=gpus, batch=batch, epochs=epochs,
                                          images_per_gpu_s=images_per_gpu_s, budget_bytes=bb,
                                          algorithm=alg)["efficiency"]
                              for bb in BUDGET_SWEEP]
    return {"gpu_counts": counts, "gpu_counts_left_out": [n for n in GPU_SWEEP if n > max_gpus],
            "max_gpus": max_gpus, "budgets": BUDGET_SWEEP, "per_gpu_batch": b, **out}


def plot_png(path: str, sw: Dict, *, preset: str, gpus: int, budget: Optional[int]) -> None:
    """``budget``: the group budget of the GPU sweep, None where it uses the preset's groups."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, c) = plt.subplots(1, 2, figsize=(11, 4.2))
    for alg in ALGORITHMS:
        a.plot(sw["gpu_counts"], sw["gpus"][alg], marker="o", ms=3, label=alg)
        c.plot(sw["budgets"], sw["budget"][alg], marker="o", ms=3, label=alg)
    a.set(xscale="log", xlabel="GPUs", ylabel="scaling efficiency", ylim=(0, 1.05),
          title=f"{preset}: {sw['per_gpu_batch']} images/GPU, "
          + (f"budget {_bytes(budget)}" if budget else "preset's groups")
          + (f"\nup to {sw['max_gpus']:,} GPUs (global batch <= {sim.IMAGENET_TRAIN:,})"
             if sw["gpu_counts_left_out"] else ""))
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
    outputs.save_figure(fig, path, dpi=110)
    plt.close(fig)
