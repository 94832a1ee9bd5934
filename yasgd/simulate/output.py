"""Text side of ``yasgd simulate``: the prediction table, the preset listing, the JSON, and the
argument checks of :func:`report` (every argument checked before any work, UsageError).
"""
from __future__ import annotations

import math
import os
from typing import Optional

from yasgd import UsageError, outputs
from yasgd.simulate import model, plot as splot
from yasgd.simulate.network import ALGORITHMS
from yasgd.simulate.presets import PRESETS, get_preset

_bytes = splot._bytes
# Yamazaki et al., arXiv 1903.12650: 2,048 V100, batch 81,920, ~90 epochs.
PAPER = {"gpus": 2048, "batch": 81920, "epochs": 90, "images_per_s": 1.73e6,
         "time_to_train_s": 74.7, "efficiency": 0.77}


def _si(x: float) -> str:
    return f"{x / 1e6:.3f} M" if x >= 1e6 else f"{x:,.0f}"


#: the table's columns: heading and the width it has where every value fits it
_COLUMNS = (("algorithm", 20), ("iter ms", 9), ("comm ms", 9), ("exposed", 9),
            ("images/s", 12), ("img/s/GPU", 11), ("effic.", 8), ("time to train", 15))


def _columns(rows) -> list:
    """The heading and ``rows`` (lists of cells) as lines: the first column left-aligned,
    the others right-aligned, each column widened where a value would otherwise run into
    its neighbour (an hours-long step, millions of GPUs)."""
    widths = [max([w] + [len(r[i]) + (1 if i == 0 else 2) for r in rows])
              for i, (_, w) in enumerate(_COLUMNS)]
    return ["".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
            for r in [[h for h, _ in _COLUMNS], *rows]]


def preset_list() -> str:
    """``yasgd simulate --preset list``: every preset, its system and each constant's source."""
    lines = []
    for name, p in PRESETS.items():
        s = p.single_node[0]
        lines.append(f"{name}: {p.title}")
        lines.append(f"  per-GPU step t(b) = c (h + b): h = {p.shape_h:.2f} images, c = "
                     f"{model.per_image_s(p) * 1e3:.4f} ms/image from {s.source} "
                     f"({s.gpus} GPUs x {s.per_gpu_batch}, MLPerf {s.mlperf_round})")
        for what, src in p.sources:
            lines.append(f"  {what}: {src}")
    return "\n".join(lines)


def text(*, preset: str, gpus: int, batch: int, epochs: float,
         images_per_gpu_s: Optional[float], budget_bytes: Optional[int],
         plot: Optional[str], json_out: Optional[str]) -> str:
    """The prediction as a text table (every algorithm), optionally the PNG and the JSON."""
    kw = dict(preset=preset, gpus=gpus, batch=batch, epochs=epochs,
              images_per_gpu_s=images_per_gpu_s, budget_bytes=budget_bytes)
    head = model.predict(**kw)
    rows = {alg: model.predict(algorithm=alg, **kw) for alg in ALGORITHMS}
    _check_finite([head, *rows.values()], kw)
    t = head["topology"]
    if head["grouping"] == "fujitsu_cubic":
        grouping = (f"Fujitsu's cubic groups + fp32 BN tail (Horovod, MLPerf v0.6) -> "
                    f"{head['groups']} collectives")
    elif head["grouping"] == "equal":
        grouping = f"{head['num_groups']} equal-bytes group(s) (MXNET_HOROVOD_NUM_GROUPS)"
    else:
        grouping = f"budget {_bytes(head['budget_bytes'])} -> {head['groups']} groups"
    tree = f"tree {t['ib_tree_latency'] * 1e6:g} us/level"
    if t["tree_bw_factor"] != 1.0 or t["tree_correction"]:
        tree += f" x{t['tree_bw_factor']:g} bw" + (" x size correction" if t["tree_correction"]
                                                   else "")
    lines = [
        f"yasgd simulate: ResNet-50 v1.5, {head['params']:,} parameters, "
        f"{head['grad_bytes'] / 1e6:.1f} MB of gradients per step; preset {preset}: "
        + head["title"],
        f"topology: {head['nodes']} node(s) x {t['gpus_per_node']} GPUs; NVLink "
        f"{t['nvlink_bw'] / 1e9:g} GB/s/GPU, {t['nvlink_latency'] * 1e6:g} us/step; IB "
        f"{t['hcas_per_node']} x {t['hca_bw'] / 1e9:g} GB/s/node, ring {t['ib_latency'] * 1e6:g} "
        f"us/step, {tree}; {t['call_latency'] * 1e6:g} us/call",
        f"per GPU: batch {head['per_gpu_batch']}, compute {head['images_per_gpu_s_compute']:,.0f} "
        + ("img/s alone (given; " if head["compute_given"] else
           f"img/s alone (t(b) = {head['per_image_s'] * 1e3:.4f} ms x ({head['shape_h']:.2f} + b), "
           f"MLPerf {head['mlperf_round']} single-node log; ")
        + f"at lock-step: forward {head['forward_s'] * 1e3:.2f} ms, "
        f"backward {head['backward_s'] * 1e3:.2f} ms;"
        f" update {head['update_s'] * 1e3:.2f} ms); {grouping}",
        f"lock-step over {gpus} GPUs: compute x{head['lockstep']:.3f} (step-time jitter "
        f"{head['step_cv']:.1%}, GPU spread {head['gpu_spread']:.0%}); Horovod cycle "
        f"{head['horovod_cycle_s'] * 1e3:g} ms, {head['fusion_copies']} fusion copies/group; NCCL "
        + (f"{head['nccl_channels']} channels of {head['sms']} SMs" if head["sms"]
           else "SM share not modelled"),
        "",
    ]
    table = [[alg + (" *" if alg == head["algorithm"] else ""), f"{r['iteration_s'] * 1e3:.2f}",
              f"{r['comm_s'] * 1e3:.2f}", f"{r['exposed_comm_s'] * 1e3:.2f}",
              _si(r["images_per_s"]), f"{r['images_per_s_per_gpu']:,.0f}",
              f"{r['efficiency']:.1%}", f"{r['time_to_train_s']:.1f} s"]
             for alg, r in rows.items()]
    paper = None
    if preset == "abci2019" and gpus == PAPER["gpus"] and batch == PAPER["batch"]:
        paper = dict(PAPER)
        table.append(["paper 1903.12650", "", "", "", _si(paper["images_per_s"]),
                      f"{paper['images_per_s'] / gpus:,.0f}", f"{paper['efficiency']:.0%}",
                      f"{paper['time_to_train_s']:.1f} s"])
    lines += _columns(table)
    lines += ["", f"* preset's algorithm. {epochs:g} epochs = {head['steps_per_epoch']} "
              f"steps/epoch (last batch padded) + {head['evals']} evaluations of "
              f"{head['eval_s'] * 1e3:.1f} ms."]
    if paper:
        for alg, r in rows.items():
            dt = r["time_to_train_s"] / paper["time_to_train_s"] - 1
            lines.append(f"vs paper, {alg}: throughput "
                         f"{r['images_per_s'] / paper['images_per_s'] - 1:+.1%}, time "
                         + (f"{dt:+.1%}" if epochs == paper["epochs"] else "n/a (epochs differ)"))
    sw = None
    if plot or json_out:
        sw = splot.sweeps(**kw)
    with outputs.together():
        if plot:
            splot.plot_png(plot, sw, preset=preset, gpus=gpus, budget=head["budget_bytes"])
            lines.append(f"plot: {plot}")
        if json_out:
            outputs.write_json(json_out, {"prediction": head, "algorithms": rows,
                                          "paper": paper, "sweeps": sw})
            lines.append(f"json: {json_out}")
    return "\n".join(lines)


def _check_finite(predictions, kw) -> None:
    """UsageError when arguments each in range still take a prediction out of the floats
    (a throughput so small that a step never ends, epochs so many that training does not):
    the report would show inf and nan; the message names every argument given."""
    bad = sorted({k for p in predictions for k, v in p.items()
                  if isinstance(v, float) and not math.isfinite(v)})
    if bad:
        given = " ".join(f"--{k.replace('_', '-')} {v:g}" if isinstance(v, float)
                         else f"--{k.replace('_', '-')} {v}"
                         for k, v in kw.items() if v is not None)
        raise UsageError(f"simulate: {given} gives no finite {', '.join(bad)}: an argument is "
                         f"beyond what the model can represent")


def report(*, preset: str = "abci2019", gpus: int = 2048, batch: int = 81920, epochs: float = 90,
           images_per_gpu_s: Optional[float] = None, budget_bytes: Optional[int] = None,
           plot: Optional[str] = None, json_out: Optional[str] = None) -> str:
    """``yasgd simulate``: the prediction as a text table; optionally a PNG and a JSON file
    (``plot`` / ``json_out`` naming a directory: ``simulate.png`` / ``simulate.json`` in it).
    ``preset="list"`` returns the preset listing. Every argument is checked before any work."""
    if preset == "list":
        return preset_list()
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
    if plot and json_out and os.path.realpath(plot) == os.path.realpath(json_out):
        raise UsageError(f"--plot and --json name the same file, {plot}")
    return text(preset=preset, gpus=gpus, batch=batch, epochs=epochs,
                images_per_gpu_s=images_per_gpu_s, budget_bytes=budget_bytes, plot=plot,
                json_out=json_out)


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
    suffix = os.path.splitext(name)[1]
    if what in NAMED_FORMAT and os.path.splitext(path)[1].lower() != suffix:
        raise UsageError(f"{what} {path}: {what} writes a {suffix[1:].upper()} file; name one "
                         f"ending in {suffix}, or a directory (it gets {name})")
    problem = outputs.file_problem(path, *OURS[what])
    if problem:
        raise UsageError(f"{what} {path}: {problem}")
    return path


# the outputs whose format the file's name chooses (matplotlib reads it from the suffix): any
# other name would fail only after the prediction, or write what OURS does not recognise
NAMED_FORMAT = ("--plot",)

# what an earlier --plot / --json of simulate looks like (file_problem replaces no other file)
OURS = {"--plot": (lambda head: head.startswith(b"\x89PNG\r\n\x1a\n")
                   and b"Software\x00Matplotlib" in head, "a PNG written by yasgd simulate"),
        "--json": (lambda head: head.startswith(b'{\n "prediction": {'),
                   "a JSON written by yasgd simulate")}
