"""End to end: `yasgd train` with 2 real ranks through mpirun, on real data.

Fashion-MNIST (Debian's IDX files) and a RecordIO set converted at test time
from real JPEGs, each for a few steps; the run directory must hold the resolved
config, metrics, provenance and the final parameters.
"""
import json
import os
import re
import subprocess
import sys

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV_BIN = os.path.dirname(sys.executable)
YASGD = os.path.join(VENV_BIN, "yasgd")
TINY = os.path.join(ROOT, "examples", "configs", "tiny.yaml")


def launch(np_, *args, timeout=300, env_extra=None):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **(env_extra or {}))
    cmd = [sys.executable, "-m", "yasgd.launch", "-np", str(np_), "--timeout", str(timeout - 20),
           "--", YASGD, "train", *args]
    return subprocess.run(["bash", "-c", 'source jobs/common.sh && exec "$@"', "_", *cmd],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def run_dir_of(proc):
    lines = [l for l in proc.stdout.splitlines() if l.startswith("run directory: ")]
    assert len(lines) == 1, proc.stdout + proc.stderr
    return lines[0].split(": ", 1)[1].strip()


def allreduces_per_group(timeline_path):
    """{yasgd group tensor name: number of allreduces} from a Horovod timeline (Chrome trace:
    one "process" per tensor, a B event named MPI_/GLOO_ALLREDUCE per allreduce of it)."""
    from test_timeline import tensor_names   # same folder: pytest puts it on sys.path
    trace = json.load(open(timeline_path))
    names = tensor_names(trace)
    counts = {}
    for e in trace:
        if e.get("ph") == "B" and e.get("name") in ("MPI_ALLREDUCE", "GLOO_ALLREDUCE"):
            name = names[e["pid"]]
            if re.match(r"^horovod_allreduce\.yasgd\.g\d+(_\d+of\d+)?$", name):
                counts[name] = counts.get(name, 0) + 1
    return counts


def test_two_rank_fashion_mnist_run_leaves_a_run_directory(tmp_path):
    timeline = tmp_path / "timeline.json"
    proc = launch(2, TINY, f"run.dir={tmp_path}", "train.max_steps=6", "train.log_interval=3",
                  env_extra={"HOROVOD_TIMELINE": str(timeline)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "final test accuracy:" in proc.stdout
    rd = run_dir_of(proc)
    assert set(os.listdir(rd)) >= {"config.yaml", "final.params", "metrics.jsonl", "provenance.json"}
    cfg = yaml.safe_load(open(os.path.join(rd, "config.yaml")))
    assert cfg["train"]["global_batch"] == 256 and cfg["train"]["max_steps"] == 6
    events = [json.loads(l) for l in open(os.path.join(rd, "metrics.jsonl"))]
    kinds = [e["event"] for e in events]
    assert kinds[0] == "start" and kinds[-1] == "end" and "train" in kinds and "eval" in kinds
    assert events[0]["world_size"] == 2
    assert [e["step"] for e in events if e["event"] == "train"] == [3, 6]
    prov = json.load(open(os.path.join(rd, "provenance.json")))
    assert prov["world_size"] == 2 and "mxnet" in prov["packages"] and prov["git"]["revision"]
    assert any(k.startswith("HOROVOD_") for k in prov["environment"])
    # only rank 0 prints the summary
    assert proc.stdout.count("final test accuracy:") == 1
    # the timeline is complete when the run ends: every gradient tensor allreduced once a step,
    # the last step included (the file parses as a whole, without a repaired tail)
    counts = allreduces_per_group(timeline)
    assert counts and set(counts.values()) == {6}, counts


def test_two_rank_recordio_run_with_validation(tmp_path):
    from yasgd.data.testdata import make_imagenet_folder
    src = make_imagenet_folder(str(tmp_path / "jpegs"), per_class_train=12, per_class_val=4, seed=0)
    conv = subprocess.run([YASGD, "data", "im2rec", src, str(tmp_path / "rec"), "--resize", "40",
                           "--no-progress"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert conv.returncode == 0, conv.stderr
    # data.eval_limit is a Fashion-MNIST key: off for RecordIO
    proc = launch(2, TINY, f"run.dir={tmp_path}/runs", "data.kind=recordio", "data.eval_limit=0",
                  f"data.root={tmp_path}/rec", "data.image_size=32", "data.val_resize=36",
                  "data.threads=1", "train.global_batch=32", "train.epochs=2", "train.max_steps=0",
                  "data.polish_epochs=1", "train.log_interval=1")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rd = run_dir_of(proc)
    evals = [json.loads(l) for l in open(os.path.join(rd, "metrics.jsonl")) if '"eval"' in l]
    assert len(evals) == 2 and all(0.0 <= e["top1"] <= 1.0 for e in evals)
