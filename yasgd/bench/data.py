"""``yasgd bench data`` (``make bench-data``): images/s of decode + augment, side by side.

Makes an ImageNet-layout folder of real JPEGs (Fashion-MNIST rendered to RGB at
64-160 px, :func:`yasgd.data.testdata.make_imagenet_folder`), converts it with
``yasgd data im2rec --resize 0`` (the records hold the very same JPEG bytes),
then times, in one process and one run, each loader turning those JPEGs into
normalised NCHW float32 batches with the same training transforms
(random-resized crop to 224 px, area [0.08, 1], aspect [3/4, 4/3], horizontal
flip, ImageNet mean/std) and the same number of threads:

    yasgd RecordTrainLoader          .rec/.idx, OpenCV in a thread pool (yasgd's loader)
                                     (also with 1 thread, as ImageRecordIter decodes with
                                     1 thread here whatever preprocess_threads says)
    gluon ImageFolderDataset         the JPEG folder, gluon.data.DataLoader(thread_pool=True)
    gluon ImageRecordDataset         the .rec, gluon.data.DataLoader(num_workers processes)
    mx.io.ImageRecordIter            the .rec, MXNet's C++ iterator (preprocess_threads)

Each loader runs one warm-up pass over the training set (not timed), then
``passes`` timed passes; the figure is the median. Batches are waited for
(``wait_to_read``) so MXNet's asynchronous engine cannot hide work. Writes
``bench_data.json`` and ``bench_data.md`` (table + hardware) into ``out_dir``.

Then, in the same run, the ImageNet-sized part (:mod:`yasgd.bench.data_imagenet`, key
``imagenet_sized``): photo-like JPEGs of about 500 x 375 px and 110 kB through yasgd's
loader on one core (train, val and decode-only images/s), and the cores per GPU that rate
needs on the ABCI nodes.
"""
from __future__ import annotations

import multiprocessing.util
import os
import re
import statistics
import sys
import tempfile
from typing import Callable, Dict, List

from yasgd import UsageError, outputs
from yasgd.bench.timing import epoch_passes, time_pass

IMAGE_SIZE = 224
BATCH = 32
THREADS = 2
MIN_AREA = 0.08
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def _cpu_model() -> str:
    from yasgd.bench.common import cpu_model
    return cpu_model()


def hardware() -> Dict[str, object]:
    """The machine and software (yasgd.bench.common.hardware; cv2 and mxnet imported, so
    their versions are the ones this process runs)."""
    import cv2
    import mxnet  # noqa: F401 -- loaded: its version is the one in use
    from yasgd.bench.common import hardware as common_hardware
    return common_hardware({"opencv": cv2.__version__})


def _gluon_transform():
    """Gluon's own transforms, called imperatively: ``transforms.Compose`` would hybridize
    ToTensor + Normalize into one CachedOp, which is not safe to call from several
    threads at once (it failed here with "Graph attr dependency shape is required")."""
    from mxnet.gluon.data.vision import transforms
    steps = [transforms.RandomResizedCrop(IMAGE_SIZE, scale=(MIN_AREA, 1.0), ratio=(3 / 4, 4 / 3)),
             transforms.RandomFlipLeftRight(), transforms.ToTensor(), transforms.Normalize(MEAN, STD)]

    def apply(x):
        for step in steps:
            x = step(x)
        return x
    return apply


# the longest path of a socket (struct sockaddr_un's sun_path, less its closing NUL), and
# what multiprocessing adds to its temporary folder's parent: "/pymp-" and "/listener-",
# each with 8 random characters
SUN_PATH_MAX = 107
SOCKET_TAIL = len("/pymp-12345678/listener-12345678")


def _socket_folder() -> str:
    """Makes multiprocessing's temporary folder, the one that the worker processes forked
    from here on inherit. Gluon's DataLoader workers hand each batch over through a socket
    there, and the pool ends them with SIGTERM, which removes nothing: made here, the folder
    is this process's, removed when it exits (a stop's unwinding included). Its sockets'
    paths must fit a socket address: under a temporary folder (``TMPDIR``) too long for
    that, it is made in the first of /tmp, /var/tmp that can hold it (as Python 3.13's
    multiprocessing does)."""
    base = tempfile.gettempdir()
    if len(base) + SOCKET_TAIL > SUN_PATH_MAX:
        short = [d for d in ("/tmp", "/var/tmp") if os.path.isdir(d)
                 and os.access(d, os.W_OK | os.X_OK)]
        if not short:
            raise UsageError(f"bench data: the temporary folder {base} is too long to hold "
                             f"the worker processes' sockets (a socket's path is at most "
                             f"{SUN_PATH_MAX} bytes) and /tmp and /var/tmp cannot be "
                             "written; set TMPDIR to a shorter folder")
        base = short[0]
    saved, tempfile.tempdir = tempfile.tempdir, base
    try:
        return multiprocessing.util.get_temp_dir()
    finally:
        tempfile.tempdir = saved


def _capture_stderr(fn):
    """(fn(), what C++ code wrote to file descriptor 2 meanwhile)."""
    sys.stderr.flush()
    with tempfile.TemporaryFile() as tmp:
        saved = os.dup(2)
        os.dup2(tmp.fileno(), 2)
        try:
            result = fn()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        return result, tmp.read().decode(errors="replace")


def _loaders(folder: str, rec: str, notes: Dict[str, str]) -> Dict[str, Callable[[], object]]:
    """name -> factory of an iterable over (data, ...) batches (one pass = one epoch)."""
    import mxnet as mx
    from mxnet import gluon

    from yasgd.data.recordio import RecordFile, RecordTrainLoader

    def yasgd_loader(threads=THREADS):
        loader = RecordTrainLoader(os.path.join(rec, "train"), rank=0, size=1, batch_size=BATCH,
                                   ctx=mx.cpu(), seed=0, num_classes=10, image_size=IMAGE_SIZE,
                                   min_area=MIN_AREA, flip=True, threads=threads)
        return epoch_passes(loader)

    def gluon_folder():
        ds = gluon.data.vision.ImageFolderDataset(os.path.join(folder, "train"))
        dl = gluon.data.DataLoader(ds.transform_first(_gluon_transform()), batch_size=BATCH,
                                   shuffle=True, last_batch="discard", num_workers=THREADS,
                                   thread_pool=True)
        return lambda: iter(dl)

    def gluon_record():
        # worker processes, not threads: ImageRecordDataset reads through one shared
        # MXIndexedRecordIO (seek, then read), which races under thread_pool=True;
        # its workers' sockets go in _socket_folder's folder, made before any work
        ds = gluon.data.vision.ImageRecordDataset(os.path.join(rec, "train.rec"))
        dl = gluon.data.DataLoader(ds.transform_first(_gluon_transform()), batch_size=BATCH,
                                   shuffle=True, last_batch="discard", num_workers=THREADS)
        return lambda: iter(dl)

    def record_iter():
        it, log = _capture_stderr(lambda: mx.io.ImageRecordIter(
            path_imgrec=os.path.join(rec, "train.rec"), path_imgidx=os.path.join(rec, "train.idx"),
            data_shape=(3, IMAGE_SIZE, IMAGE_SIZE), batch_size=BATCH, shuffle=True,
            random_resized_crop=True, min_random_area=MIN_AREA, max_random_area=1.0,
            min_aspect_ratio=3 / 4, max_aspect_ratio=4 / 3, rand_mirror=True,
            mean_r=MEAN[0] * 255, mean_g=MEAN[1] * 255, mean_b=MEAN[2] * 255,
            std_r=STD[0] * 255, std_g=STD[1] * 255, std_b=STD[2] * 255,
            preprocess_threads=THREADS, round_batch=False, seed=0, verbose=True))
        found = re.search(r"use (\d+) threads for decoding", log)
        notes["mx.io.ImageRecordIter"] = (
            f"asked for {THREADS} preprocess_threads, decodes with {found.group(1)}"
            if found else "decoding threads not reported")

        total = len(RecordFile(os.path.join(rec, "train")))

        def one_pass():
            # with round_batch=False the last batch is filled up but reports pad=0:
            # count only the images of the set
            it.reset()
            seen = 0
            for b in it:
                real = min(BATCH - b.pad, total - seen)
                seen += real
                yield [b.data[0][:real]]
        return one_pass

    notes["yasgd RecordTrainLoader, 1 thread"] = "1 thread (to compare with ImageRecordIter)"
    notes["gluon ImageRecordDataset+DataLoader"] = (f"{THREADS} worker processes (its shared "
                                                    "record reader is not thread-safe)")
    return {"yasgd RecordTrainLoader": yasgd_loader,
            "gluon ImageFolderDataset+DataLoader": gluon_folder,
            "gluon ImageRecordDataset+DataLoader": gluon_record,
            "mx.io.ImageRecordIter": record_iter,
            "yasgd RecordTrainLoader, 1 thread": lambda: yasgd_loader(threads=1)}


def measure(folder: str, rec: str, passes: int, log=print) -> List[Dict[str, object]]:
    results = []
    notes: Dict[str, str] = {}
    for name, factory in _loaders(folder, rec, notes).items():
        make_iter = factory()
        n_warm, t_warm = time_pass(make_iter)
        rates, images = [], 0
        for _ in range(passes):
            n, t = time_pass(make_iter)
            rates.append(n / t)
            images = n
        med = statistics.median(rates)
        note = notes.get(name, f"{THREADS} threads")
        log(f"  {name:38s} {med:8.1f} images/s  (passes: {', '.join(f'{r:.0f}' for r in rates)}; "
            f"{images} images/pass; warm-up {n_warm / t_warm:.0f}; {note})")
        results.append({"loader": name, "images_per_s": round(med, 1), "note": note,
                        "passes_images_per_s": [round(r, 1) for r in rates],
                        "images_per_pass": images, "warmup_images_per_s": round(n_warm / t_warm, 1)})
    return results


def plots(quick: bool) -> List[str]:
    """The plots a run writes under its ``--out`` (checked by ``output.check_paths``)."""
    return []


def run(out_dir: str, quick: bool = False) -> dict:
    from yasgd.bench import data_imagenet
    from yasgd.data import im2rec
    from yasgd.data.testdata import make_imagenet_folder
    per_class = 50 if quick else 300
    passes = 3 if quick else 5
    _socket_folder()
    os.makedirs(out_dir, exist_ok=True)
    hw = hardware()
    print(f"bench data: {hw['cpu']}, {hw['cores']} cores, mxnet {hw['mxnet']}, "
          f"opencv {hw['opencv']}, OMP_NUM_THREADS={hw['omp_num_threads']}")
    with tempfile.TemporaryDirectory(prefix="yasgd-bench-data-") as tmp:
        folder = make_imagenet_folder(os.path.join(tmp, "jpeg"), per_class_train=per_class,
                                      per_class_val=2, sizes=(64, 96, 128, 160), seed=0)
        rec = os.path.join(tmp, "rec")
        im2rec.convert(folder, rec, resize=0, workers=THREADS, progress=False)
        n = per_class * 10
        print(f"  {n} JPEGs of 64-160 px -> {IMAGE_SIZE} px crops, batch {BATCH}, "
              f"{THREADS} threads, median of {passes} passes after 1 warm-up pass")
        results = measure(folder, rec, passes)
        imagenet_sized = data_imagenet.run(tmp, quick)
    by_name = {r["loader"]: r["images_per_s"] for r in results}
    ratio = by_name["yasgd RecordTrainLoader"] / by_name["gluon ImageFolderDataset+DataLoader"]
    report = {"bench": "data", "quick": quick, "hardware": hw,
              "setup": {"images": n, "source": "Fashion-MNIST rendered to RGB JPEG, 64-160 px",
                        "image_size": IMAGE_SIZE, "batch": BATCH, "threads": THREADS,
                        "min_area": MIN_AREA, "passes": passes, "statistic": "median",
                        "warmup_passes": 1},
              "results": results,
              "yasgd_vs_gluon_folder": round(ratio, 2),
              "imagenet_sized": imagenet_sized}
    lines = [
        "# Data loading: decode + augment (yasgd bench data)", "",
        f"{n} real JPEGs (Fashion-MNIST rendered to RGB, 64-160 px) -> random-resized crop "
        f"{IMAGE_SIZE} px + flip + normalise, NCHW float32, batch {BATCH}, {THREADS} threads; "
        f"median of {passes} passes after one warm-up pass, all loaders in one run"
        + (" (--quick)" if quick else "") + ".", "",
        "| loader | images/s | passes (images/s) | threads |", "|---|---:|---|---|"]
    for r in results:
        lines.append(f"| {r['loader']} | {r['images_per_s']:.0f} | "
                     f"{', '.join(f'{v:.0f}' for v in r['passes_images_per_s'])} | {r['note']} |")
    lines += ["", f"yasgd's loader / Gluon ImageFolderDataset+DataLoader: {ratio:.2f}x", "",
              f"Hardware: {hw['cpu']}, {hw['cores']} cores (1-min load average {hw['load_avg_1min']} "
              f"at start), OMP_NUM_THREADS={hw['omp_num_threads']}; Python {hw['python']}, "
              f"MXNet {hw['mxnet']}, NumPy {hw['numpy']}, OpenCV {hw['opencv']}; {hw['platform']}.", ""]
    lines += data_imagenet.md_lines(imagenet_sized)
    with outputs.together():
        outputs.write_json(os.path.join(out_dir, "bench_data.json"), report)
        outputs.write_text(os.path.join(out_dir, "bench_data.md"), "\n".join(lines))
    print(f"  yasgd / gluon ImageFolderDataset: {ratio:.2f}x")
    print(f"wrote {os.path.join(out_dir, 'bench_data.json')} and {os.path.join(out_dir, 'bench_data.md')}")
    return report
