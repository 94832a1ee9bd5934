"""yasgd.envcheck: the environment variables OpenMP, MXNet and Horovod read as numbers or
names are refused with one line before any of them starts (MXNet would abort from C++ or
wait for good, Horovod would read garbage as 0)."""
import os
import subprocess
import sys

import pytest

from yasgd import envcheck

YASGD = os.path.join(os.path.dirname(sys.executable), "yasgd")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = os.path.join(ROOT, "examples", "configs", "tiny.yaml")


@pytest.mark.parametrize("name,value", [
    ("OMP_NUM_THREADS", "1"), ("OMP_NUM_THREADS", " 2 "), ("MXNET_CPU_WORKER_NTHREADS", "4"),
    ("MXNET_EXEC_ENABLE_ADDTO", "0"), ("MXNET_CUDNN_AUTOTUNE_DEFAULT", "2"),
    ("HOROVOD_FUSION_THRESHOLD", "67108864"), ("HOROVOD_FUSION_THRESHOLD", "0"),
    ("HOROVOD_CYCLE_TIME", "0.2"), ("HOROVOD_CYCLE_TIME", "5"), ("HOROVOD_CYCLE_TIME", "0"), ("HOROVOD_LOG_LEVEL", "WARNING"),
    ("MXNET_ENGINE_TYPE", "NaiveEngine"), ("YASGD_OPS", "mxnet"),
    ("OMP_NUM_THREADS", "+2"), ("HOROVOD_CYCLE_TIME", "1e-3"), ("HOROVOD_CYCLE_TIME", ".5"),
    ("MXNET_MKLDNN_ENABLED", "TRUE"), ("MXNET_MKLDNN_ENABLED", "0"),
    ("HOROVOD_TIMELINE", "timeline.json"), ("HOROVOD_TIMELINE", "/tmp/timeline.json"),
    ("OMPI_COMM_WORLD_RANK", "0"), ("PMIX_RANK", "17"), ("SLURM_STEP_TASKS_PER_NODE", "4"),
    ("SLURM_STEP_TASKS_PER_NODE", "4(x2),3"),
])
def test_values_their_readers_take(name, value):
    assert envcheck.value_problem(name, value) is None


@pytest.mark.parametrize("name,value,why", [
    ("OMP_NUM_THREADS", "4,2", "must be an integer in [1, 2147483647]"),
    ("OMP_NUM_THREADS", "0", "must be an integer in [1, 2147483647]"),
    ("MXNET_CPU_WORKER_NTHREADS", "0", "must be an integer in [1, 2147483647]"),
    ("MXNET_OMP_MAX_THREADS", "abc", "must be an integer in [1, 2147483647]"),
    ("MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_FWD", "1e3", "must be an integer in [0, 2147483647]"),
    ("MXNET_CUDNN_AUTOTUNE_DEFAULT", "3", "must be an integer in [0, 2]"),
    ("HOROVOD_FUSION_THRESHOLD", "64MB", "must be an integer in [0, 9223372036854775807]"),
    ("HOROVOD_CACHE_CAPACITY", "-5", "must be an integer in [0, 2147483647]"),
    ("HOROVOD_CYCLE_TIME", "nan", "must be a finite number in [0, 86400000]"),
    ("HOROVOD_CYCLE_TIME", "1e15", "must be a finite number in [0, 86400000]"),
    ("HOROVOD_CYCLE_TIME", "-1", "must be a finite number in [0, 86400000]"),
    ("HOROVOD_LOG_LEVEL", "loud", "must be one of trace, debug, info, warning, error, fatal"),
    ("MXNET_ENGINE_TYPE", "naiveengine", "must be one of NaiveEngine, ThreadedEngine, "
     "ThreadedEnginePerDevice, ThreadedEnginePooled"),
    ("YASGD_OPS", "Yasgd", "must be one of yasgd, mxnet"),
    # what Python's int() and float() take and C's readers do not
    ("OMP_NUM_THREADS", "1_0", "must be an integer in [1, 2147483647]"),
    ("OMP_NUM_THREADS", "\uff12", "must be an integer in [1, 2147483647]"),
    ("HOROVOD_FUSION_THRESHOLD", "1_000", "must be an integer in [0, 9223372036854775807]"),
    ("HOROVOD_CYCLE_TIME", "1_0", "must be a finite number in [0, 86400000]"),
    ("HOROVOD_CYCLE_TIME", "\uff10.5", "must be a finite number in [0, 86400000]"),
    ("MXNET_MKLDNN_ENABLED", "yes", "must be one of true, false, 1, 0 (any case, no spaces)"),
    ("MXNET_MKLDNN_ENABLED", " 1", "must be one of true, false, 1, 0 (any case, no spaces)"),
    ("YASGD_HOST_KIND", "GPU", "must be one of cpu, gpu"),
    ("HOROVOD_TIMELINE", "/nonexistent-yasgd/t.json", "must name a regular file that can be "
     "written in an existing folder (directory /nonexistent-yasgd does not exist)"),
    # Horovod would block opening a pipe; root may write anywhere by the mode bits, /proc too
    ("HOROVOD_TIMELINE", "/dev/null", "must name a regular file that can be written in an "
     "existing folder (/dev/null exists and is not a regular file)"),
    ("HOROVOD_TIMELINE", "/proc/timeline.json", "must name a regular file that can be written "
     "in an existing folder (/proc is not writable (No such file or directory))"),
    ("HOROVOD_TIMELINE", "/", "must name a regular file that can be written in an existing "
     "folder (/ exists and is not a regular file)"),
    # what a launcher announces, which yasgd reads before Horovod starts: "²" passes
    # str.isdigit and fails int()
    *((name, value, "must be a count in ASCII digits, as a launcher writes it")
      for name in ("OMPI_COMM_WORLD_RANK", "HOROVOD_SIZE", "PMI_RANK", "SLURM_NODEID",
                   "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_STEP_NUM_TASKS")
      for value in ("\u00b2", "\u0663", "1_0", "+1", " 1", "-1", "0x1")),
    *(("SLURM_STEP_TASKS_PER_NODE", value, "must be task counts N or N(xM), comma-separated, "
       "as srun writes them") for value in ("2(x\u00b2)", "\u00b2", "2,,1", "2(x3", "2x3")),
])
def test_values_their_readers_do_not_take(name, value, why):
    assert envcheck.value_problem(name, value) == why
    assert envcheck.problem({name: value}) == (
        f"environment variable {name} {why}, got {value!r} (read by {envcheck.SPEC[name][3]})")


@pytest.mark.parametrize("name,value", [
    ("OMP_NUM_THREADS", "1_0"), ("OMP_NUM_THREADS", "+2"),
    ("MXNET_MKLDNN_ENABLED", "yes"), ("MXNET_MKLDNN_ENABLED", "TRUE"),
])
def test_the_rule_is_the_readers_own(name, value):
    """MXNet itself, given the value: it aborts (from C++, exit 134) where the check refuses
    and runs a convolution where the check accepts."""
    env = dict(os.environ, **{name: value})
    run = subprocess.run([sys.executable, "-c", (
        "import mxnet as mx\n"
        "x, w = mx.nd.ones((1, 3, 8, 8)), mx.nd.ones((4, 3, 3, 3))\n"
        "mx.nd.Convolution(x, w, kernel=(3, 3), num_filter=4, no_bias=True).asnumpy()\n")],
        env=env, capture_output=True, text=True, timeout=120)
    refused = envcheck.value_problem(name, value) is not None
    assert (run.returncode != 0) is refused, (run.returncode, run.stderr[-500:])


def test_unset_and_empty_are_the_readers_default():
    assert envcheck.problem({}) is None
    assert envcheck.problem({name: "" for name in envcheck.SPEC}) is None


def test_yasgd_ops_names_are_the_librarys():
    from yasgd.ops import library
    assert envcheck.YASGD_OPS_BACKENDS == library.BACKENDS
    assert envcheck.SPEC["YASGD_OPS"][1] == library.BACKENDS


def test_shipped_tuning_defaults_pass():
    # every value jobs/common.sh exports, on a CPU host and a GPU host
    from yasgd import launch
    for kind in ("cpu", "gpu"):
        env = {k: v for k, v in os.environ.items() if k not in envcheck.SPEC}
        env["YASGD_HOST_KIND"] = kind
        merged = launch.with_tuning_defaults(env)
        assert envcheck.problem(merged) is None, kind


@pytest.mark.parametrize("argv,name,value", [
    (["train", TINY, "run.dir={tmp}"], "OMP_NUM_THREADS", "4,2"),
    (["train", TINY, "run.dir={tmp}"], "MXNET_CPU_WORKER_NTHREADS", "0"),
    (["preflight"], "YASGD_OPS", "bogus"),
    (["bench", "optimizer", "--out", "{tmp}"], "HOROVOD_CYCLE_TIME", "soon"),
    (["launch", "-np", "2", "--", YASGD, "train", TINY, "run.dir={tmp}"],
     "HOROVOD_FUSION_THRESHOLD", "64MB"),
    # jobs/common.sh would give any other value than cpu or gpu the cpu settings
    (["launch", "-np", "2", "--", YASGD, "train", TINY, "run.dir={tmp}"],
     "YASGD_HOST_KIND", "GPU"),
    # what --grace defaults to
    (["launch", "-np", "2", "--", YASGD, "train", TINY, "run.dir={tmp}"],
     "OMPI_MCA_odls_base_sigkill_timeout", "abc"),
    # read as the rank or the job's size before Horovod starts (a traceback from int())
    (["train", TINY, "run.dir={tmp}"], "OMPI_COMM_WORLD_SIZE", "\u00b2"),
    (["preflight"], "OMPI_COMM_WORLD_LOCAL_RANK", "\u00b2"),
])
def test_commands_refuse_before_anything_starts(tmp_path, argv, name, value):
    env = dict(os.environ, **{name: value})
    p = subprocess.run([YASGD, *[a.format(tmp=tmp_path) for a in argv]], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stdout == "", p.stdout + p.stderr
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("yasgd: error: "), p.stderr
    assert f"environment variable {name} " in p.stderr and repr(value) in p.stderr
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("name", ["OMPI_COMM_WORLD_RANK", "HOROVOD_RANK", "PMI_RANK",
                                  "SLURM_PROCID"])
def test_check_config_reads_no_rank_it_cannot(tmp_path, name):
    # check-config says its warnings on the first rank only; a rank it cannot read is none
    # (it checks a config, not the environment of a job it is not in)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(open(TINY).read() + "\n# a comment\n")
    p = subprocess.run([YASGD, "check-config", str(cfg), "run.name=exp"],
                       env=dict(os.environ, **{name: "\u00b2"}), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
