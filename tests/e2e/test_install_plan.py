"""jobs/install.sh --dry-run: the plan for a CPU and for CUDA MXNet builds, and the
prerequisite checks of an unprivileged install.

Every run is a subprocess bounded by a timeout, against temporary or fake venvs (a
`python -m venv --without-pip` with fake package metadata), with a fake CUDA toolkit
and NCCL where a build should be ready: no network, no GPU, the real .venv untouched.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INSTALL = os.path.join(REPO, "jobs", "install.sh")
TIMEOUT = 60  # seconds; a dry run takes well under one
CPU = "mxnet==1.9.1"
#: an nvcc in PATH=/usr/bin:/bin or an nccl.h where install.sh looks without being told
SYSTEM_CUDA = ("/usr/bin/nvcc", "/bin/nvcc", "/usr/include/nccl.h", "/usr/local/include/nccl.h",
               "/usr/local/cuda/include/nccl.h")
#: variables that point the script at a CUDA toolkit or NCCL: never inherited
CUDA_VARS = ("CUDA_HOME", "CUDA_PATH", "NCCL_HOME", "CPATH", "C_INCLUDE_PATH",
             "CPLUS_INCLUDE_PATH", "MXNET", "DRY_RUN", "CXX")


def _env(mxnet, **extra):
    env = {k: v for k, v in os.environ.items()
           if k not in CUDA_VARS and not k.startswith("HOROVOD_")}
    env["MXNET"] = mxnet
    env.update(extra)
    return env


def _run(args, env, user=None):
    cmd = ["bash", INSTALL, *args]
    if user is not None:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *cmd]
    return subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=TIMEOUT)


def _plan(venv, mxnet, **extra):
    """The dry run's plan lines (the text after "[install] plan: ")."""
    p = _run(["--dry-run", str(venv)], _env(mxnet, **extra))
    assert p.returncode == 0, p.stdout + p.stderr
    lines = [ln[len("[install] plan: "):] for ln in p.stdout.splitlines()
             if ln.startswith("[install] plan: ")]
    assert lines, p.stdout + p.stderr
    return lines


def _line(lines, prefix):
    hits = [ln for ln in lines if ln.startswith(prefix)]
    assert len(hits) == 1, (prefix, lines)
    return hits[0]


def _snapshot(root):
    """Every path under root with its size and mtime: a dry run must change none."""
    out = {}
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(d, name)
            st = os.lstat(p)
            out[p] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture
def cuda(tmp_path):
    """A fake CUDA 11 toolkit (bin/nvcc, include/cuda_runtime.h) and NCCL (include/nccl.h)."""
    home = tmp_path / "cuda-11"
    (home / "bin").mkdir(parents=True)
    (home / "include").mkdir()
    (home / "include" / "cuda_runtime.h").write_text("/* fake */\n")
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 11.0, V11.0.221'\n")
    nvcc.chmod(0o755)
    nccl = tmp_path / "nccl-2"
    (nccl / "include").mkdir(parents=True)
    (nccl / "include" / "nccl.h").write_text("#define NCCL_MAJOR 2\n")
    return home, nccl


def _fake_venv(path, dists, horovod_stamp=None, reqs_stamp=None):
    """A venv without pip whose metadata lists `dists` (name, version); a horovod
    distribution comes with its MXNet extension library (an empty file)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True,
                   timeout=TIMEOUT)
    site = subprocess.run([str(path / "bin" / "python"), "-c",
                           "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True,
                          timeout=TIMEOUT).stdout.strip()
    for name, version in dists:
        info = os.path.join(site, f"{name.replace('-', '_')}-{version}.dist-info")
        os.makedirs(info)
        with open(os.path.join(info, "METADATA"), "w") as f:
            f.write(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        if name == "horovod":
            os.makedirs(os.path.join(site, "horovod", "mxnet"))
            open(os.path.join(site, "horovod", "__init__.py"), "w").close()
            open(os.path.join(site, "horovod", "mxnet",
                              "mpi_lib.cpython-311-x86_64-linux-gnu.so"), "w").close()
    if horovod_stamp is not None:
        (path / ".yasgd-horovod").write_text(horovod_stamp + "\n")
    if reqs_stamp is not None:
        (path / ".yasgd-reqs").write_text(reqs_stamp + "\n")
    return path


def _reqs_stamp(lines):
    """The stamp install.sh writes for the pip requirements of a plan."""
    reqs = _line(lines, "pip: install ")[len("pip: install "):].split()
    return hashlib.sha1(("\n".join(reqs + ["horovod==0.28.1"]) + "\n").encode()).hexdigest()[:12]


def test_cpu_plan_has_no_nccl(tmp_path):
    venv = tmp_path / "venv"
    lines = _plan(venv, CPU)
    assert not venv.exists(), "the dry run created the venv"
    assert "mxnet: mxnet==1.9.1 (CPU build" in _line(lines, "mxnet: mxnet==")
    assert "mxnet==1.9.1" in _line(lines, "pip: install ").split()
    assert _line(lines, "horovod: ") == "horovod: build horovod==0.28.1: absent"
    build = _line(lines, "horovod build: ")
    for flag in ("HOROVOD_WITH_MXNET=1", "HOROVOD_WITH_MPI=1", "HOROVOD_WITH_GLOO=1",
                 "HOROVOD_WITHOUT_TENSORFLOW=1", "HOROVOD_WITHOUT_PYTORCH=1"):
        assert flag in build.split(), build
    assert "NCCL" not in build and "CUDA" not in build, build
    assert _line(lines, "check: horovodrun") == \
        "check: horovodrun --check-build requires: MXNet MPI Gloo"
    assert not [ln for ln in lines if ln.startswith(("blocked", "error"))], lines


@pytest.mark.parametrize("mxnet,cuda_version,how", [
    ("mxnet-cu110==1.9.1", "11.0", "env"),       # CUDA_HOME / NCCL_HOME set
    ("mxnet-cu117==1.9.1", "11.7", "modules"),   # what `module load` sets: PATH, CPATH
])
def test_cuda_plan_builds_horovod_with_nccl(tmp_path, cuda, mxnet, cuda_version, how):
    home, nccl = cuda
    if how == "env":
        extra = {"CUDA_HOME": str(home), "NCCL_HOME": str(nccl)}
    else:
        extra = {"PATH": f"{home}/bin:{os.environ['PATH']}", "CPATH": f"{nccl}/include"}
    lines = _plan(tmp_path / "venv", mxnet, **extra)
    assert f"(CUDA {cuda_version} build: Horovod with NCCL)" in _line(lines, "mxnet: mxnet-cu")
    assert mxnet in _line(lines, "pip: install ").split()
    assert _line(lines, "check: nvcc: ") == f"check: nvcc: {home}/bin/nvcc"
    assert _line(lines, "check: nccl.h: ") == f"check: nccl.h: {nccl}/include/nccl.h"
    build = _line(lines, "horovod build: ").split()
    for flag in ("HOROVOD_WITH_MXNET=1", "HOROVOD_WITH_MPI=1", "HOROVOD_WITH_GLOO=1",
                 "HOROVOD_GPU_OPERATIONS=NCCL", "HOROVOD_NCCL_LINK=SHARED",
                 f"HOROVOD_CUDA_HOME={home}", f"HOROVOD_NCCL_HOME={nccl}"):
        assert flag in build, build
    assert _line(lines, "check: horovodrun") == \
        "check: horovodrun --check-build requires: MXNet MPI Gloo NCCL"
    assert _line(lines, "horovod stamp: ").endswith(f"= mxnet={mxnet} gpu_operations=NCCL")
    assert not [ln for ln in lines if ln.startswith(("blocked", "error"))], lines


def test_cuda_plan_without_cuda_names_what_is_missing(tmp_path):
    """The dry run works without CUDA: it says what the install would stop on."""
    for p in SYSTEM_CUDA:
        if os.path.exists(p):
            pytest.skip(f"this host has {p}: nothing would be missing")
    lines = _plan(tmp_path / "venv", "mxnet-cu110==1.9.1", PATH="/usr/bin:/bin")
    assert "error: missing nvcc" in "\n".join(lines)
    assert "error: missing nccl.h" in "\n".join(lines)
    assert any(ln.startswith("hint: ABCI 2019 (UGE): module load ") for ln in lines)
    assert any(ln.startswith("hint: ABCI 3.0 (PBS): module load ") for ln in lines)
    assert _line(lines, "blocked: ").startswith("blocked: the install would stop here "
                                                "(missing: nvcc nccl.h)")


@pytest.mark.parametrize("mxnet", ["mxnet-cu110==1.9.1", "mxnet-cu117==1.9.1"])
def test_switch_from_cpu_rebuilds_horovod_and_keeps_one_mxnet(tmp_path, cuda, mxnet):
    home, nccl = cuda
    venv = _fake_venv(tmp_path / "venv", [("mxnet", "1.9.1"), ("horovod", "0.28.1")],
                      horovod_stamp="mxnet=mxnet==1.9.1 gpu_operations=none")
    before = _snapshot(venv)
    lines = _plan(venv, mxnet, CUDA_HOME=str(home), NCCL_HOME=str(nccl))
    assert _snapshot(venv) == before, "the dry run changed the venv"
    name = mxnet.split("==")[0]
    assert _line(lines, "horovod: ") == \
        f"horovod: rebuild horovod==0.28.1: built against mxnet==1.9.1, now {mxnet}"
    assert _line(lines, "mxnet: uninstall ").startswith(
        f"mxnet: uninstall mxnet first, keep one MXNet: {name} ")
    assert mxnet in _line(lines, "pip: install ").split()
    assert "HOROVOD_GPU_OPERATIONS=NCCL" in _line(lines, "horovod build: ").split()


def test_same_cpu_mxnet_keeps_everything(tmp_path):
    """The venv of the CPU default, run again with the same MXNET: nothing rebuilt."""
    stamp = _reqs_stamp(_plan(tmp_path / "new", CPU))
    venv = _fake_venv(tmp_path / "venv", [("mxnet", "1.9.1"), ("horovod", "0.28.1")],
                      horovod_stamp="mxnet=mxnet==1.9.1 gpu_operations=none",
                      reqs_stamp=stamp)
    lines = _plan(venv, CPU)
    assert _line(lines, "pip: ").startswith("pip: pinned stack up to date")
    assert _line(lines, "mxnet: one ") == "mxnet: one MXNet distribution kept: mxnet"
    assert _line(lines, "horovod: ").startswith("horovod: keep horovod 0.28.1, nothing rebuilt")


def test_venv_without_stamp_counts_as_built_against_its_mxnet(tmp_path, cuda):
    """A venv from before the Horovod stamp: built against the MXNet it holds, no NCCL."""
    home, nccl = cuda
    venv = _fake_venv(tmp_path / "venv", [("mxnet", "1.9.1"), ("horovod", "0.28.1")])
    assert _line(_plan(venv, CPU), "horovod: ").startswith("horovod: keep horovod 0.28.1")
    lines = _plan(venv, "mxnet-cu110==1.9.1", CUDA_HOME=str(home), NCCL_HOME=str(nccl))
    assert _line(lines, "horovod: ") == ("horovod: rebuild horovod==0.28.1: built against "
                                         "mxnet==1.9.1, now mxnet-cu110==1.9.1")


def test_cuda_horovod_without_nccl_is_rebuilt(tmp_path, cuda):
    home, nccl = cuda
    venv = _fake_venv(tmp_path / "venv", [("mxnet-cu110", "1.9.1"), ("mxnet", "1.9.1"),
                                          ("horovod", "0.28.1")],
                      horovod_stamp="mxnet=mxnet-cu110==1.9.1 gpu_operations=none")
    lines = _plan(venv, "mxnet-cu110==1.9.1", CUDA_HOME=str(home), NCCL_HOME=str(nccl))
    assert _line(lines, "horovod: ") == "horovod: rebuild horovod==0.28.1: built without NCCL"
    # two MXNets installed (a broken venv): the other one goes, the chosen one stays
    assert _line(lines, "mxnet: uninstall ").startswith(
        "mxnet: uninstall mxnet first, keep one MXNet: mxnet-cu110 ")


def _module_lines():
    out = subprocess.run(
        ["bash", "-c", '. jobs/modules.sh; echo "$YASGD_MODULES_ABCI2019"; '
                       'echo "$YASGD_MODULES_ABCI3"'],
        cwd=REPO, capture_output=True, text=True, check=True, timeout=TIMEOUT).stdout
    return out.splitlines()


def test_module_names_are_versioned_site_names():
    abci2019, abci3 = _module_lines()
    assert re.fullmatch(r"gcc/\S+ cuda/11\.0/\S+ cudnn/8\.0/\S+ nccl/2\.7/\S+ openmpi/\S+",
                        abci2019), abci2019
    assert re.fullmatch(r"hpcx/\S+ cuda/\S+ cudnn/\S+ nccl/\S+", abci3), abci3


def test_unprivileged_cuda_install_names_what_is_missing():
    """Not root, no nvcc in PATH: the install stops before changing anything, with one
    error line per missing prerequisite and the clusters' module load lines."""
    user = None
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("root without setpriv: cannot run the install unprivileged")
        user = 65534
    for p in SYSTEM_CUDA:
        if os.path.exists(p):
            pytest.skip(f"this host has {p}: nothing would be missing")
    tmp = tempfile.mkdtemp(prefix="yasgd-install-")
    try:
        os.chmod(tmp, 0o755)   # the unprivileged user may look, not write
        venv = os.path.join(tmp, "venv")
        env = {"PATH": "/usr/bin:/bin", "HOME": tmp, "LANG": "C.UTF-8",
               "MXNET": "mxnet-cu110==1.9.1"}
        if user is not None:
            probe = _run(["--help"], env, user=user)
            if probe.returncode != 0:
                pytest.skip(f"user {user} cannot run {INSTALL}: {probe.stderr.strip()[:200]}")
        p = _run([venv], env, user=user)
        assert p.returncode != 0, p.stdout + p.stderr
        err = p.stderr.splitlines()
        assert len([ln for ln in err if ln.startswith("[install] error: missing nvcc ")]) == 1, err
        assert len([ln for ln in err if ln.startswith("[install] error: missing nccl.h ")]) == 1, err
        abci2019, abci3 = _module_lines()
        assert f"[install] hint: ABCI 2019 (UGE): module load {abci2019}" in err, err
        assert f"[install] hint: ABCI 3.0 (PBS): module load {abci3}" in err, err
        assert not os.path.exists(venv), "the venv was created before the checks"
        # its dry run: the checks it makes instead of apt-get
        d = _run(["--dry-run", venv], env, user=user)
        assert d.returncode == 0, d.stdout + d.stderr
        assert "checking the build prerequisites instead" in d.stdout
        for tool in ("C++ compiler", "cmake", "make", "mpicc", "mpirun"):
            assert f"[install] plan: check: {tool}" in d.stdout, d.stdout
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_makefile_passes_dry_run():
    make = shutil.which("make")
    if make is None:
        pytest.skip("no make")
    dry = subprocess.run([make, "-n", "install", "DRY_RUN=1"], cwd=REPO, capture_output=True,
                         text=True, timeout=TIMEOUT).stdout
    real = subprocess.run([make, "-n", "install"], cwd=REPO, capture_output=True, text=True,
                          timeout=TIMEOUT).stdout
    assert "jobs/install.sh --dry-run" in dry, dry
    assert "--dry-run" not in real, real


def test_shellcheck_clean():
    if shutil.which("shellcheck") is None:
        pytest.skip("no shellcheck")
    p = subprocess.run(["shellcheck", "jobs/install.sh", "jobs/modules.sh"], cwd=REPO,
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 0, p.stdout + p.stderr
