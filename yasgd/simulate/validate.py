"""``yasgd simulate --validate``: the model against published runs it was not built from.

Cases: the paper and every multi-node MXNet ResNet-50 run of Fujitsu (MLPerf v0.6) and NVIDIA
(MLPerf v0.6, v3.0, v4.0) that a preset covers, read from ``examples/results/mlperf_logs.json``
(``multi_node``) by one rule: images/s = global batch x optimizer steps per epoch / median epoch
of the runs used; the published time is the MLPerf score, the mean run_start..run_stop of the
middle three of five runs. The model gets the run's GPUs, batch, epochs and evaluation count
(convergence decides them, which the model does not model) and the single-node log of the run's
own MLPerf round; nothing else of the run. Its time to train counts steps and evaluations only,
not the start-up and first-epoch warm-up inside run_start..run_stop.
"""
from __future__ import annotations

import json
import os
import statistics
from typing import Dict, List, Optional

from yasgd.simulate.model import predict

LOGS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                    "examples", "results", "mlperf_logs.json")
# Yamazaki et al., arXiv 1903.12650 (paper.md): 2,048 V100, batch 81,920, 1.73 M images/s,
# 74.7 s; its runs predate MLPerf v0.6, so the v0.5 single-node log is its generation.
PAPER_CASE = {"case": "paper (Yamazaki et al. 2019)", "preset": "abci2019", "mlperf_round": "v0.5",
              "gpus": 2048, "global_batch": 81920, "epochs": 90, "evals": None,
              "images_per_s": 1.73e6, "score_s": 74.7, "repository": "arXiv 1903.12650",
              "results": "paper.md"}


def cases(path: str = LOGS) -> List[Dict]:
    """The paper, then the recorded multi-node runs in file order."""
    with open(path) as f:
        rec = json.load(f)
    return [PAPER_CASE] + list(rec["multi_node"])


def rows(path: str = LOGS) -> List[Dict]:
    """One dict per case: published and predicted images/s and time to train, their errors."""
    out = []
    for c in cases(path):
        r = predict(preset=c["preset"], gpus=c["gpus"], batch=c["global_batch"],
                    epochs=c["epochs"], mlperf_round=c["mlperf_round"],
                    algorithm=c.get("algorithm"), evals=c.get("evals"))
        out.append(dict(case=c["case"], preset=c["preset"], mlperf_round=c["mlperf_round"],
                        gpus=c["gpus"], batch=c["global_batch"], epochs=c["epochs"],
                        algorithm=r["algorithm"], images_per_s=c["images_per_s"],
                        time_s=c["score_s"], model_images_per_s=r["images_per_s"],
                        model_time_s=r["time_to_train_s"],
                        err_images_per_s=r["images_per_s"] / c["images_per_s"] - 1,
                        err_time=r["time_to_train_s"] / c["score_s"] - 1,
                        source=f"{c['repository']} {c['results']}".strip()))
    return out


def summary(rs: Optional[List[Dict]] = None) -> Dict[str, float]:
    """Median and worst |error| over the cases, on images/s and on time to train."""
    rs = rows() if rs is None else rs
    a = [abs(r["err_images_per_s"]) for r in rs]
    t = [abs(r["err_time"]) for r in rs]
    return {"median_images_per_s": statistics.median(a), "worst_images_per_s": max(a),
            "median_time": statistics.median(t), "worst_time": max(t),
            "within_15": sum(1 for x, y in zip(a, t) if x <= .15 and y <= .15), "cases": len(rs)}


def _m(x: float) -> str:
    return f"{x / 1e6:.3f} M"


def table(rs: Optional[List[Dict]] = None) -> str:
    """The text table ``yasgd simulate --validate`` prints."""
    rs = rows() if rs is None else rs
    head = (f"{'case':<46}{'preset':<10}{'GPUs':>6}{'batch':>8}{'ep':>4}{'img/s':>11}"
            f"{'model':>11}{'err':>8}{'time s':>9}{'model':>8}{'err':>8}")
    lines = [head]
    for r in rs:
        lines.append(f"{r['case']:<46}{r['preset']:<10}{r['gpus']:>6}{r['batch']:>8}"
                     f"{r['epochs']:>4g}{_m(r['images_per_s']):>11}"
                     f"{_m(r['model_images_per_s']):>11}{r['err_images_per_s'] * 100:>+7.1f}%"
                     f"{r['time_s']:>9.2f}{r['model_time_s']:>8.2f}{r['err_time'] * 100:>+7.1f}%")
    s = summary(rs)
    lines += ["", f"|error| over {s['cases']} cases: images/s median "
              f"{s['median_images_per_s'] * 100:.1f} %, worst {s['worst_images_per_s'] * 100:.1f} "
              f"%; time to train median {s['median_time'] * 100:.1f} %, worst "
              f"{s['worst_time'] * 100:.1f} %; within 15 % on both: {s['within_15']} of "
              f"{s['cases']}"]
    return "\n".join(lines)
