"""``yasgd bench data``, ImageNet-sized part: can yasgd's CPU loader feed a GPU?

The Fashion-MNIST part of the benchmark (:mod:`yasgd.bench.data`) decodes 64-160 px JPEGs;
ImageNet's photos are about 500 x 375 px and 110 kB, ten to twenty times the pixels. This
part makes photo-like JPEGs of that size and weight
(:func:`yasgd.data.testdata.make_photo_folder`: 1/f^2 colour fields, gradients, shapes with
sharp edges, grain; quality 90), converts them with ``yasgd data im2rec --resize 0`` (the
records hold the very same JPEG bytes), and times yasgd's own RecordIO code path on ONE
core: one process, one thread (``threads=0``: every image is decoded in the calling thread,
OpenCV limited to one thread), batch 32, host NCHW float32:

    train          RecordTrainLoader: read + decode + random-resized crop 224 (area
                   [0.08, 1], aspect [3/4, 4/3]) + flip + normalise
    val            RecordValLoader: read + decode + shorter side 256, centre crop 224 + normalise
    decode         record read + cv2.imdecode alone
    train_256      the train transform on the same photos converted with ``--resize 256``
                   (shorter side 256, quality 90): preprocessed smaller records

Statistic, fixed before any result was seen: for each of the four, one warm-up pass over
the set (not timed), then ``PASSES`` = 5 timed passes; the figure is the median of the five
per-pass rates (images/s). ``--quick`` uses fewer images, the same passes.

Cores per GPU (:func:`feeds`): a GPU's demand in images/s (:func:`gpu_demand`: the paper's
V100s, the MLPerf v4.0 H200 MXNet log) divided by the per-core train rate is the number of
cores one GPU needs, compared with the cores per GPU of a node (:data:`NODES`). The rate is
per core of the machine that ran the benchmark, not of the nodes' Xeons; the training
process itself (MXNet engine, Horovod) needs cores too, so "needed" is a lower bound.
"""
from __future__ import annotations

import json
import os
import statistics
import time
from typing import Callable, Dict, List, Optional

IMAGE_SIZE = 224
VAL_RESIZE = 256
BATCH = 32
PASSES = 5
QUALITY = 90
NUM_CLASSES = 10

#: Compute nodes: core and GPU counts from the systems' published descriptions.
NODES = (
    {"node": "ABCI 2019 (ABCI 1.0) compute node", "cpu": "2 x Intel Xeon Gold 6148",
     "cores": 40, "gpus": 4, "gpu": "V100",
     # the machine of the paper; AIST's ABCI system description (compute node (V): two 20-core
     # Xeon Gold 6148, four Tesla V100 SXM2); The Next Platform, "ABCI evolves to meet Japan's
     # changing AI needs" (2025-04-14)
     "source": "AIST's ABCI 1.0 system description; The Next Platform, \"ABCI evolves to meet "
               "Japan's changing AI needs\", 2025-04-14"},
    {"node": "ABCI 3.0 compute node", "cpu": "2 x Intel Xeon Platinum 8558",
     "cores": 96, "gpus": 8, "gpu": "H200",
     # Takano et al., "ABCI 3.0: Evolution of the leading AI infrastructure in Japan" (AIST,
     # 2024-11-14): 6,128 H200 in 8-GPU nodes, two 48-core Xeon Platinum 8558 per node
     "source": "Takano et al., ABCI 3.0: Evolution of the leading AI infrastructure in Japan, "
               "AIST, 2024"},
)


def gpu_demand(paper: dict) -> Dict[str, Dict[str, object]]:
    """{gpu: {images_per_s, source}}: the images/s one GPU consumes training ResNet-50."""
    from yasgd.simulate.presets import H200_V40
    return {
        "V100": {"images_per_s": paper["images_per_s"] / paper["gpus"],
                 "source": f"the paper: {paper['images_per_s'] / 1e6:.2f} M images/s on "
                           f"{paper['gpus']:,} GPUs"},
        "H200": {"images_per_s": H200_V40.per_gpu_batch / H200_V40.iteration_s,
                 "source": f"MLPerf training {H200_V40.mlperf_round}, NVIDIA h200_ngc24.04_mxnet "
                           f"(8 x H200, MXNet): {H200_V40.per_gpu_batch} images per GPU per "
                           f"{H200_V40.iteration_s * 1e3:.1f} ms iteration"},
    }


def feeds(section: dict, paper: dict) -> List[Dict[str, object]]:
    """Per node: cores per GPU it has, cores per GPU the measured train rate needs (from the
    full-size JPEG records, and from the records resized to shorter side 256)."""
    rate, rate_256 = section["per_core"]["train"], section["per_core"]["train_256"]
    demand = gpu_demand(paper)
    out = []
    for n in NODES:
        want = demand[n["gpu"]]["images_per_s"]
        have = n["cores"] / n["gpus"]
        out.append(dict(n, cores_per_gpu=have, demand=want,
                        demand_source=demand[n["gpu"]]["source"], needed=want / rate,
                        enough=want / rate <= have, needed_256=want / rate_256,
                        enough_256=want / rate_256 <= have))
    return out


def _paper() -> dict:
    from yasgd.bench import common
    with open(os.path.join(common.REPO_ROOT, "examples", "results", "paper.json")) as f:
        return json.load(f)["yasgd"]


# -- measurement --------------------------------------------------------------------------
def _rates(one_pass: Callable[[], int], passes: int) -> List[float]:
    one_pass()  # warm-up, not timed
    rates = []
    for _ in range(passes):
        t0 = time.perf_counter()
        n = one_pass()
        rates.append(n / (time.perf_counter() - t0))
    return rates


def _loader_pass(loader) -> Callable[[], int]:
    """One epoch of ``loader`` per call, every batch waited for; returns the images
    (the Fashion-MNIST part's pass: :mod:`yasgd.bench.timing`)."""
    from yasgd.bench.timing import epoch_passes, time_pass
    make_iter = epoch_passes(loader)
    return lambda: time_pass(make_iter)[0]


def measure(prefix: str, prefix_256: str, passes: int = PASSES) -> Dict[str, List[float]]:
    """{transform: per-pass images/s} on one thread for the records at ``prefix``."""
    import cv2
    import mxnet as mx

    from yasgd.data.recordio import RecordFile, RecordTrainLoader, RecordValLoader, _decode
    cv2.setNumThreads(1)

    def train(p):
        return RecordTrainLoader(p, rank=0, size=1, batch_size=BATCH, ctx=mx.cpu(), seed=0,
                                 num_classes=NUM_CLASSES, image_size=IMAGE_SIZE, min_area=0.08,
                                 flip=True, threads=0)
    val = RecordValLoader(prefix, rank=0, size=1, batch_size=BATCH, ctx=mx.cpu(),
                          num_classes=NUM_CLASSES, image_size=IMAGE_SIZE, val_resize=VAL_RESIZE,
                          threads=0)
    rf = RecordFile(prefix)

    def decode() -> int:
        for i in range(len(rf)):
            _decode(rf, i, NUM_CLASSES)
        return len(rf)
    return {"train": _rates(_loader_pass(train(prefix)), passes),
            "val": _rates(_loader_pass(val), passes),
            "decode": _rates(decode, passes),
            "train_256": _rates(_loader_pass(train(prefix_256)), passes)}


def run(tmp: str, quick: bool, log: Callable[[str], None] = print) -> dict:
    """Make the photos under ``tmp``, convert, measure; the ``imagenet_sized`` section."""
    from yasgd.data import im2rec
    from yasgd.data.testdata import make_photo_folder
    n = 64 if quick else 384
    t0 = time.perf_counter()
    folder = make_photo_folder(os.path.join(tmp, "photos"), n_train=n, n_val=NUM_CLASSES, seed=0,
                               num_classes=NUM_CLASSES, quality=QUALITY)
    with open(os.path.join(folder, "photos.json")) as f:
        made = json.load(f)
    im2rec.convert(folder, os.path.join(tmp, "photo_rec"), resize=0, workers=2, progress=False)
    im2rec.convert(folder, os.path.join(tmp, "photo_rec256"), resize=VAL_RESIZE, quality=QUALITY,
                   workers=2, progress=False)
    image = {"n": n, "mean_kb": made["train"]["mean_kb"], "mean_px": made["train"]["mean_px"],
             "quality": QUALITY, "source": made["source"]}
    log(f"  ImageNet-sized: {n} photo-like JPEGs, mean {image['mean_kb']} kB, "
        f"{image['mean_px']:,} px (made in {time.perf_counter() - t0:.0f} s); one thread, "
        f"median of {PASSES} passes after 1 warm-up pass")
    rates = measure(os.path.join(tmp, "photo_rec", "train"),
                    os.path.join(tmp, "photo_rec256", "train"))
    per_core = {k: round(statistics.median(v), 1) for k, v in rates.items()}
    for k, v in rates.items():
        log(f"  per core {k:10s} {per_core[k]:8.1f} images/s  "
            f"(passes: {', '.join(f'{r:.0f}' for r in v)})")
    section = {"image": image, "per_core": per_core,
               "passes_images_per_s": {k: [round(r, 1) for r in v] for k, v in rates.items()},
               "setup": {"threads": 1, "processes": 1, "batch": BATCH, "image_size": IMAGE_SIZE,
                         "val_resize": VAL_RESIZE, "passes": PASSES, "warmup_passes": 1,
                         "statistic": "median", "resized_records": f"shorter side {VAL_RESIZE}, "
                                                                   f"quality {QUALITY}"}}
    section["feeds"] = [{k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items()}
                        for r in feeds(section, _paper())]
    for r in section["feeds"]:
        log(f"  {r['node']}: {r['gpu']} needs {r['needed']:.1f} cores of this machine per GPU, "
            f"has {r['cores_per_gpu']:g}: {'enough' if r['enough'] else 'NOT enough'}")
    return section


# -- Markdown: bench_data.md and the docs block ----------------------------------------
def _summary(s: dict) -> str:
    im, pc, st = s["image"], s["per_core"], s["setup"]
    return (f"{im['n']} ImageNet-sized photo-like JPEGs (mean {im['mean_kb']:.0f} kB, "
            f"{im['mean_px']:,} px, quality {im['quality']}) through yasgd's RecordIO loader on "
            f"one core (one process, one thread, batch {st['batch']}; median of {st['passes']} "
            f"passes after {st['warmup_passes']} warm-up pass): training transform "
            f"{pc['train']:,.0f} images/s, validation transform {pc['val']:,.0f} images/s, JPEG "
            f"decode alone {pc['decode']:,.0f} images/s; training transform on records resized "
            f"beforehand to {st['resized_records']}: {pc['train_256']:,.0f} images/s.")


def _table(rows: List[dict]) -> List[str]:
    from yasgd.bench import common
    body = [[r["node"], f"{r['cpu']}, {r['gpus']} x {r['gpu']}", f"{r['cores_per_gpu']:g}",
             f"{r['demand']:,.0f}", f"{r['needed']:.1f}", "yes" if r["enough"] else "**no**",
             f"{r['needed_256']:.1f}", "yes" if r["enough_256"] else "**no**"] for r in rows]
    return [common.md_table(["node", "CPUs, GPUs", "cores per GPU", "GPU demand (images/s)",
                             "cores needed per GPU", "enough?",
                             f"cores needed, records resized to {VAL_RESIZE}", "enough?"],
                            body, "llrrrlrl")]


def md_lines(section: dict) -> List[str]:
    """The section of bench_data.md."""
    return ["## ImageNet-sized images, per core", "", _summary(section), "",
            *_table(feeds(section, _paper())), "",
            "Cores needed per GPU = GPU demand / per-core train rate of this machine.", ""]


def loader_feeds_gpu(rec) -> str:
    """The ``loader-feeds-gpu`` block of docs/cluster.md (``rec``: report_util.Records)."""
    d = rec.bench("data")
    s: Optional[dict] = d.get("imagenet_sized")
    if not s:
        return ("Not recorded yet: `yasgd bench data --out examples/results`, then "
                "`python -m yasgd.bench.report`.")
    paper = rec.json("paper.json")["yasgd"]
    rows = feeds(s, paper)
    hw = d["hardware"]
    lines = [_summary(s), "", *_table(rows), ""]
    for r in rows:
        verdict = ("enough for the loader alone" if r["enough"] else
                   f"**not enough**: short by {r['needed'] / r['cores_per_gpu']:.1f}x")
        lines.append(f"- {r['node']} ({r['source']}): one {r['gpu']} consumes "
                     f"{r['demand']:,.0f} images/s ({r['demand_source']}), which takes "
                     f"{r['needed']:.1f} cores at this machine's per-core rate; the node has "
                     f"{r['cores_per_gpu']:g} cores per GPU: {verdict}.")
    short = [r for r in rows if not r["enough"]]
    fix_256 = [r["node"] for r in short if r["enough_256"]]
    lines += ["", (f"The figures are per core of the benchmark machine ({hw['cpu']}, "
                   f"{hw['cores']} cores), not of the nodes' Xeons, which may be faster or slower "
                   f"per core; the training process itself (MXNet engine, Horovod) needs cores "
                   f"too, so the cores needed are a lower bound.")]
    if short:
        lines += ["", "Where the cores do not suffice ("
                  + ", ".join(r["node"] for r in short)
                  + "), do not decode full-size JPEGs on the CPU: decode on the GPU with NVIDIA "
                  "DALI, as the paper and MLPerf's MXNet submissions do (its MXNet plugin, "
                  "`nvidia.dali.plugin.mxnet`, ends with DALI 1.39, \"the last release that will "
                  "officially support the MXNet framework\" per DALI's MXNet documentation: pin "
                  "it next to MXNet 1.9.1, e.g. `nvidia-dali-cuda120<=1.39`), or train from "
                  "preprocessed smaller records "
                  "(MLPerf-style resized ImageNet, e.g. `yasgd data im2rec --resize 256`), at "
                  f"{s['per_core']['train_256']:,.0f} images/s per core here, which "
                  + (f"is enough for the {' and the '.join(fix_256)}" if fix_256
                     else "is still not enough") + " (table above)."]
    return "\n".join(lines)
