"""``yasgd preflight`` and the Horovod/MXNet settings per host kind (jobs/common.sh).

No GPU exists here: a GPU host is a fake ``nvidia-smi`` on the PATH that lists GPUs while the
installed MXNet (a CPU build) sees none, which is exactly the situation of a CPU wheel on a
GPU node. Every subprocess is bounded by a timeout that kills its whole session.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)
from yasgd import jobs, preflight  # noqa: E402

PYTHON = sys.executable
HOST = socket.gethostname()
OK_LINE = re.compile(r"^\[preflight\] ok: 2 rank\(s\) on 1 host\(s\), cpu, allreduce over "
                     r"(MPI|Gloo), [\d.]+ s$", re.M)


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HOROVOD_", "OMPI_", "PMIX_", "PBS_", "SLURM_", "SGE_", "MXNET_"))
           and k not in ("YASGD_HOST_KIND", "CUDA_VISIBLE_DEVICES")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=REPO)
    env.update(extra)
    return env


def _run(cmd, env, timeout=120, cwd=REPO) -> subprocess.CompletedProcess:
    """cmd in a session of its own, killed whole on timeout (mpirun and every rank)."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"{cmd} did not finish in {timeout} s:\n{out[-3000:]}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(cmd, proc.returncode, out, None)


def fake_gpu_bin(tmp_path, gpus: int = 4, cc: str = "7.0", delay_s: float = 0) -> str:
    """A folder with an nvidia-smi that lists ``gpus`` GPUs of capability ``cc`` (after
    ``delay_s`` seconds) and a numactl that runs its command; returns a PATH with it first."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\n"
                   f"sleep {delay_s}\n"
                   "case \"$1\" in\n"
                   f"  -L) i=0; while [ $i -lt {gpus} ]; do echo \"GPU $i: Fake V100 (UUID: "
                   "GPU-$i)\"; i=$((i+1)); done ;;\n"
                   f"  --query-gpu=compute_cap) echo {cc} ;;\n"
                   "  *) echo 00000000:FF:1F.7 ;;\nesac\n")
    numactl = bin_dir / "numactl"
    numactl.write_text("#!/bin/sh\nshift 2\nexec \"$@\"\n")
    for f in (smi, numactl):
        f.chmod(0o755)
    return f"{bin_dir}:{os.environ['PATH']}"


# -- the command ---------------------------------------------------------------------------
def test_two_ranks_pass():
    t0 = time.time()
    r = _run([PYTHON, "-m", "yasgd.launch", "-np", "2", "--timeout", "120", "--",
              PYTHON, "-m", "yasgd.cli", "preflight"], _env())
    assert r.returncode == 0, r.stdout[-3000:]
    assert len(OK_LINE.findall(r.stdout)) == 1, r.stdout[-3000:]   # rank 0 only
    print(f"\n{OK_LINE.search(r.stdout).group(0)} (launch included: {time.time() - t0:.1f} s)")


def test_cpu_wheel_on_a_gpu_host_fails_in_seconds(tmp_path):
    """nvidia-smi lists 4 GPUs, the CPU build of MXNet sees 0: one line naming the mismatch,
    the capability and the fix, exit status 3, and no allreduce attempted."""
    t0 = time.time()
    r = _run([PYTHON, "-m", "yasgd.cli", "preflight"],
             _env(PATH=fake_gpu_bin(tmp_path, gpus=4, cc="7.0")), timeout=60)
    took = time.time() - t0
    assert r.returncode == preflight.EXIT_STATUS == 3, r.stdout
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stdout, r.stdout
    line = lines[0]
    assert line.startswith("yasgd: error: preflight: rank 0 on "), line
    assert "GPU mismatch: nvidia-smi lists 4 GPU(s) but MXNet 1.9.1 sees 0" in line, line
    assert "install a CUDA build (make install MXNET=mxnet-cu110==1.9.1)" in line, line
    assert line.count("compute capability 7.0") == 1, line
    assert took < 30, f"{took:.1f} s"
    print(f"\n{line} ({took:.1f} s)")


def test_a_rank_that_hangs_ends_the_preflight(tmp_path):
    r = _run([PYTHON, "-m", "yasgd.cli", "preflight", "--timeout", "2"],
             _env(PATH=fake_gpu_bin(tmp_path, delay_s=60)), timeout=60)
    assert r.returncode == 3, r.stdout
    assert re.search(r"^yasgd: error: preflight: rank 0 on \S+ did not finish within 2 s "
                     r"\(while checking the device\); ending the job", r.stdout, re.M), r.stdout


@pytest.mark.parametrize("value", ["0", "-1", "nan", "soon", "1e300"])
def test_bad_timeout_is_a_usage_error(value):
    r = _run([PYTHON, "-m", "yasgd.cli", "preflight", "--timeout", value], _env(), timeout=60)
    assert r.returncode == 2, r.stdout
    assert r.stdout.strip().splitlines() == [
        f"yasgd: error: preflight: argument --timeout: must be a finite number of seconds in "
        f"(0, 31536000], got {value!r} (see yasgd preflight --help)"]


def test_wheel_hints_without_and_with_wheelarch(monkeypatch):
    import yasgd
    monkeypatch.setitem(sys.modules, "yasgd.wheelarch", None)     # absent: the capability only
    monkeypatch.delattr(yasgd, "wheelarch", raising=False)
    assert preflight.wheel_hint("9.0") == "compute capability 9.0"
    assert preflight.install_hint("9.0") == "make install MXNET=mxnet-cu110==1.9.1"
    assert "unknown" in preflight.wheel_hint(None)
    fake = type(sys)("yasgd.wheelarch")
    fake.describe = lambda cc: f"compute capability {cc}: wheels that run it: none"
    fake.wheels_for = lambda cc: [] if cc == "9.0" else ["mxnet-cu112==1.9.1"]
    monkeypatch.setitem(sys.modules, "yasgd.wheelarch", fake)
    monkeypatch.setattr(yasgd, "wheelarch", fake, raising=False)
    assert preflight.wheel_hint("9.0") == "compute capability 9.0: wheels that run it: none"
    assert preflight.install_hint("9.0") == "no MXNet 1.9.1 wheel runs on it"
    assert preflight.install_hint("8.6") == "make install MXNET=mxnet-cu112==1.9.1"


def test_visible_devices(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert preflight.visible_devices(4) == ["0", "1", "2", "3"]
    for value, want in (("2", ["2"]), ("1,3", ["1", "3"]), ("", []), ("0,-1,2", ["0"]),
                        ("0,1,2,3,4,5", ["0", "1", "2", "3"])):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
        assert preflight.visible_devices(4) == want, value


# -- the fusion guard -------------------------------------------------------------------------
def test_fusion_guard():
    groups = [[4, 100], [1000]]                      # bytes: padded 16 + 112, 1008
    assert preflight.padded_group_bytes(groups[0]) == 128
    assert preflight.largest_padded_group(groups) == 1008
    on = {"HOROVOD_DISABLE_GROUP_FUSION": "1"}
    assert preflight.fusion_guard(groups, dict(on, HOROVOD_FUSION_THRESHOLD="1008")) is None
    msg = preflight.fusion_guard(groups, dict(on, HOROVOD_FUSION_THRESHOLD="1007"))
    assert msg and "HOROVOD_FUSION_THRESHOLD=1007" in msg and "at least 1008" in msg
    assert "HOROVOD_FUSION_THRESHOLD=0" in preflight.fusion_guard(
        groups, dict(on, HOROVOD_FUSION_THRESHOLD="0"))
    assert preflight.fusion_guard(groups, on) is None              # Horovod's default: 128 MiB
    assert preflight.fusion_guard(groups, {"HOROVOD_FUSION_THRESHOLD": "0"}) is None  # CPU hosts
    assert preflight.fusion_guard(groups, {"HOROVOD_DISABLE_GROUP_FUSION": "0",
                                           "HOROVOD_FUSION_THRESHOLD": "0"}) is None


# -- jobs/common.sh per host kind ---------------------------------------------------------
def common_env(path: str) -> dict:
    """The environment after sourcing jobs/common.sh with PATH=path (nothing preset)."""
    env = _env(PATH=path)
    r = _run(["bash", "-c", 'set -euo pipefail; . jobs/common.sh; env -0'], env, timeout=30)
    assert r.returncode == 0, r.stdout
    return dict(item.split("=", 1) for item in r.stdout.split("\0") if "=" in item)


@pytest.fixture(scope="module")
def resnet50_groups():
    """The trainer's groups of yasgd's ResNet-50 at the default budget."""
    from yasgd.allreduce import group_params
    from yasgd.model import resnet50_tensors
    _, params = resnet50_tensors()
    return group_params(params)


def test_gpu_host_settings(tmp_path, resnet50_groups):
    env = common_env(fake_gpu_bin(tmp_path, gpus=4))
    largest = preflight.largest_padded_group(resnet50_groups)
    print(f"\nResNet-50: {len(resnet50_groups)} groups, largest padded group {largest} bytes; "
          f"HOROVOD_FUSION_THRESHOLD={env['HOROVOD_FUSION_THRESHOLD']}")
    assert env["YASGD_HOST_KIND"] == "gpu"
    assert env["HOROVOD_DISABLE_GROUP_FUSION"] == "1"
    assert int(env["HOROVOD_FUSION_THRESHOLD"]) >= largest > 0
    assert preflight.fusion_guard(resnet50_groups, env) is None
    assert env["HOROVOD_CYCLE_TIME"] == "0.2" and env["HOROVOD_HIERARCHICAL_ALLREDUCE"] == "0"
    assert env["HOROVOD_BATCH_D2D_MEMCOPIES"] == "1"
    assert env["MXNET_CUDNN_AUTOTUNE_DEFAULT"] == "1" and env["MXNET_EXEC_ENABLE_ADDTO"] == "1"
    assert env["MXNET_GPU_WORKER_NTHREADS"] == env["MXNET_GPU_COPY_NTHREADS"] == "1"
    assert env["YASGD_PREFLIGHT"] == "1"


def test_a_gpu_listed_in_several_writes_is_a_gpu_host(tmp_path):
    # nvidia-smi writes its second line after the first has been read: a reader that
    # quits at the first match leaves that write to a closed pipe (SIGPIPE), which
    # common.sh's pipefail would take for a host without GPUs
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: Fake V100 (UUID: GPU-0)'\nsleep 0.3\n"
                   "echo 'GPU 1: Fake V100 (UUID: GPU-1)'\n")
    smi.chmod(0o755)
    assert common_env(f"{bin_dir}:{os.environ['PATH']}")["YASGD_HOST_KIND"] == "gpu"


def test_cpu_host_settings(tmp_path, resnet50_groups):
    empty = tmp_path / "nogpu"
    empty.mkdir()
    path = ":".join(p for p in os.environ["PATH"].split(":")
                    if not os.path.exists(os.path.join(p, "nvidia-smi")))
    env = common_env(path)
    assert env["YASGD_HOST_KIND"] == "cpu"
    assert env["HOROVOD_FUSION_THRESHOLD"] == "0" and env["HOROVOD_CYCLE_TIME"] == "5"
    assert "HOROVOD_DISABLE_GROUP_FUSION" not in env
    assert env["MXNET_CUDNN_AUTOTUNE_DEFAULT"] == "0"
    assert "MXNET_GPU_WORKER_NTHREADS" not in env and "MXNET_EXEC_ENABLE_ADDTO" not in env
    assert preflight.fusion_guard(resnet50_groups, env) is None
    # a host whose nvidia-smi lists no GPU is a CPU host
    assert common_env(fake_gpu_bin(tmp_path, gpus=0))["YASGD_HOST_KIND"] == "cpu"


def test_rendered_gpu_job_stops_at_the_preflight(tmp_path):
    """A rendered PBS job on a "GPU node" (fake nvidia-smi, 2 GPUs) whose MXNet is a CPU
    build: the job's own preflight step (same mpirun line, before the training) fails on
    every rank, the job exits 3 with one [yasgd-job] line, and the training never starts."""
    script = tmp_path / "job.sh"
    script.write_text(jobs.render(scheduler="pbs", nodes=1, gpus_per_node=2,
                                  config="examples/configs/tiny.yaml", walltime="0:10:00"))
    assert ". \"$YASGD_HOME/jobs/common.sh\"" in script.read_text()
    assert ". \"$YASGD_HOME/jobs/lib.sh\"" in script.read_text()
    nodefile = tmp_path / "nodefile"
    nodefile.write_text(f"{HOST}\n{HOST}\n")
    env = _env(PATH=fake_gpu_bin(tmp_path, gpus=2), PBS_NODEFILE=str(nodefile),
               PBS_JOBID="77.pbs", PBS_O_WORKDIR=REPO, YASGD_RUNS=str(tmp_path / "runs"),
               YASGD_PYTHON=PYTHON, YASGD_ARGS="",
               # mpirun waits about twice its grace after the failed ranks before it exits;
               # the scripts' 10 s default would only add that wait here
               OMPI_MCA_odls_base_sigkill_timeout="2")
    for var in ("BASH_FUNC_module%%", "MODULESHOME", "YASGD_TRAIN_CMD"):
        env.pop(var, None)
    t0 = time.time()
    r = _run(["bash", str(script)], env, timeout=180)
    took = time.time() - t0
    assert r.returncode == 3, r.stdout[-4000:]
    job_dir = next((tmp_path / "runs").glob("tiny-pbs-77.pbs*"))
    assert (job_dir / "exit_status").read_text().strip() == "3"
    command = (job_dir / "command.sh").read_text()
    assert "mpirun -np 2" in command and "yasgd.cli train" in command
    assert re.search(r"^\[yasgd-job\] preflight: mpirun -np 2 .* -m yasgd\.cli preflight "
                     r"--timeout 120 $", r.stdout, re.M), r.stdout[-4000:]
    log = (job_dir / "job.log").read_text()
    assert "GPU mismatch: nvidia-smi lists 2 GPU(s) but MXNet 1.9.1 sees 0" in log, log[-3000:]
    failed = [ln for ln in r.stdout.splitlines() if ln.startswith("[yasgd-job] error: preflight")]
    assert len(failed) == 1 and "exit status 3" in failed[0], r.stdout[-4000:]
    assert "[yasgd-job] starting:" not in r.stdout and "[bind]" not in r.stdout
    assert not re.search(r"^run directory: ", r.stdout, re.M)       # no training ran
    print(f"\n{failed[0]} ({took:.1f} s)")


# Every job script that loads environment modules names their versions (a module system's
# default version changes under a job), taken from the one list in jobs/modules.sh.
@pytest.mark.parametrize("rel,var", [("jobs/abci/pbs/train.sh", "YASGD_MODULES_ABCI3"),
                                     ("jobs/abci/uge/train.sh", "YASGD_MODULES_ABCI2019")])
def test_job_scripts_pin_their_modules(rel, var):
    with open(os.path.join(REPO, rel)) as f:
        m = re.search(r'^YASGD_MODULES="\$\{YASGD_MODULES-([^}]*)\}"', f.read(), re.M)
    assert m and m.group(1) == f"${var}", rel
    r = _run(["bash", "-c", f'. jobs/modules.sh && printf "%s" "${var}"'], _env(), timeout=30)
    names = r.stdout.split()
    assert names and not [n for n in names if "/" not in n], f"{var}: modules without a version"


def test_shellcheck_common_and_lib():
    if shutil.which("shellcheck") is None:
        pytest.fail("shellcheck is not installed (apt-get install shellcheck)")
    r = _run(["shellcheck", "-x", "jobs/common.sh", "jobs/lib.sh"], _env(), timeout=60)
    assert r.returncode == 0, r.stdout
