"""The cluster job scripts, executed: shellcheck, PBS and UGE with their
environments faked, Slurm for real (a local slurmctld + slurmd).

Each scheduler test runs a 2-rank tiny training (examples/configs/tiny.yaml)
through the job script's mpirun and checks the run directory it leaves: the
job's provenance written before MPI (config.yaml, provenance.json,
pip-freeze.txt, hostfile, exit_status) and the training's own run directory
(config.yaml, metrics.jsonl) inside it. Every launch is bounded by a timeout
that kills its whole session (mpirun and every rank).
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)
from yasgd import UsageError, jobs  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from slurm_harness import local_slurm  # noqa: E402,F401  (the fixture)

PYTHON = sys.executable
CONFIG = "examples/configs/tiny.yaml"
JOB_TIMEOUT = 240  # seconds for one 2-rank tiny job on a busy 2-core machine
# Extra overrides for every tiny training (YASGD_ARGS); empty: the config as it is.
TRAIN_ARGS = ""
HOST = socket.gethostname()
MODULE_VARS = ("BASH_FUNC_module%%", "BASH_FUNC_module()", "BASH_FUNC_ml%%", "MODULESHOME",
               "MODULEPATH", "LOADEDMODULES", "MODULES_CMD")


# YASGD_TEST_STANDIN=1 replaces `yasgd train` on every rank by this stand-in
# (YASGD_TRAIN_CMD): it joins Horovod, checks the world size, and leaves a run
# directory as `yasgd train` does. For debugging the job plumbing only.
STANDIN = r"""
import json, os, sys, time
sys.path.insert(0, os.environ["YASGD_HOME"])
import horovod.mxnet as hvd, mxnet as mx
from yasgd import config
cfg = config.load(sys.argv[1], sys.argv[2:])
hvd.init()
total = hvd.allreduce(mx.nd.array([1.0]), average=False, name="standin").asscalar()
assert total == hvd.size(), (total, hvd.size())
if hvd.rank() == 0:
    d = os.path.join(cfg.run.dir, cfg.run.name + time.strftime("-%Y%m%d-%H%M%S"))
    os.makedirs(d)
    cfg.dump(os.path.join(d, "config.yaml"))
    with open(os.path.join(d, "metrics.jsonl"), "w") as f:
        f.write(json.dumps({"step": 0, "ranks": hvd.size()}) + "\n")
    print("run directory:", d)
"""


def job_env(tmp_path, **extra) -> dict:
    """The environment a batch job starts with here: no `module` command,
    one OpenMP thread per rank, run directories under tmp_path."""
    env = {k: v for k, v in os.environ.items()
           if k not in MODULE_VARS and not k.startswith(("PBS_", "SGE_", "SLURM_", "OMPI_"))}
    env.update(OMP_NUM_THREADS="1", YASGD_CONFIG=CONFIG, YASGD_RUNS=str(tmp_path / "runs"),
               YASGD_PYTHON=PYTHON, YASGD_ARGS=TRAIN_ARGS)
    if os.environ.get("YASGD_TEST_STANDIN") == "1":
        standin = tmp_path / "standin.py"
        standin.write_text(STANDIN)
        env["YASGD_TRAIN_CMD"] = f"{PYTHON} {standin}"
    env.update(extra)
    return env


def kill_session(sid: int) -> None:
    """SIGKILL every process of session ``sid`` (mpirun puts each rank in a
    process group of its own, but they stay in the session we started)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[3]) == sid:
                os.kill(int(entry), signal.SIGKILL)
        except (OSError, IndexError, ValueError):
            continue


def run_bounded(cmd, cwd, env, timeout=JOB_TIMEOUT) -> subprocess.CompletedProcess:
    """Run cmd in a session of its own; on timeout kill the session (mpirun, ranks)."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_session(proc.pid)
        out, _ = proc.communicate()
        pytest.fail(f"{cmd} did not finish in {timeout} s:\n{out[-4000:]}")
    finally:
        kill_session(proc.pid)  # nothing may outlive the test
    return subprocess.CompletedProcess(cmd, proc.returncode, out, None)


def check_run_dir(output: str, runs, scheduler: str, job_id: str, ranks: int = 2) -> str:
    """The run directory a job left; returns the training's run directory."""
    job_dirs = sorted(runs.glob(f"tiny-{scheduler}-{job_id}*"))
    assert len(job_dirs) == 1, (list(runs.iterdir()) if runs.exists() else "no runs", output[-3000:])
    job_dir = job_dirs[0]
    # Written before MPI started.
    cfg = yaml.safe_load((job_dir / "config.yaml").read_text())
    assert cfg["run"]["dir"] == str(job_dir)
    assert cfg["data"]["limit"] == 2048 and cfg["model"]["name"] == "resnet8"
    assert f"world size {ranks}:" in (job_dir / "config.yaml").read_text()
    prov = json.loads((job_dir / "provenance.json").read_text())
    assert prov["hosts"] == [HOST]
    assert "mxnet" in prov["packages"] and "git" in prov
    assert re.search(r"^mxnet==", (job_dir / "pip-freeze.txt").read_text(), re.M)
    assert (job_dir / "hostfile").read_text() == f"{HOST} slots={ranks}\n"
    assert (job_dir / "hostlist.orig").is_file() and (job_dir / "job-script").is_file()
    assert "mpirun -np 2" in (job_dir / "command.sh").read_text()
    assert (job_dir / "exit_status").read_text().strip() == "0"
    # Every rank went through jobs/bind.sh.
    log = (job_dir / "job.log").read_text()
    # Before the training, the job's preflight passed on every rank (rank 0's one line).
    assert len(re.findall(rf"^\[preflight\] ok: {ranks} rank\(s\) on 1 host\(s\), cpu, "
                          r"allreduce over MPI, [\d.]+ s$", log, re.M)) == 1, log[-3000:]
    for r in range(ranks):
        assert f"[bind] rank {r} local {r}/{ranks}" in log, log[-3000:]
    # The training's own run directory, inside the job's.
    m = re.search(r"^run directory: (\S+)$", output, re.M)
    assert m, output[-3000:]
    train_dir = m.group(1)
    assert os.path.dirname(train_dir) == str(job_dir)
    assert os.path.isfile(os.path.join(train_dir, "config.yaml"))
    with open(os.path.join(train_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    assert records, "metrics.jsonl is empty"
    prov_path = os.path.join(train_dir, "provenance.json")
    if os.path.isfile(prov_path):  # the training's own, written by rank 0
        with open(prov_path) as f:
            assert json.load(f)["world_size"] == ranks
    return train_dir


# -- 1. shellcheck ------------------------------------------------------------------
def test_shellcheck_jobs_and_rendered_scripts():
    if shutil.which("shellcheck") is None:
        pytest.fail("shellcheck is not installed (apt-get install shellcheck)")
    r = run_bounded(["bash", "jobs/check.sh"], cwd=REPO, env=dict(os.environ, PYTHON=PYTHON),
                    timeout=180)
    assert r.returncode == 0, r.stdout
    for name in ("pbs.sh", "uge.sh", "slurm.sbatch", "train.sbatch", "bind.sh", "lib.sh",
                 "common.sh", "check.sh"):
        assert name in r.stdout, r.stdout
    assert "jobs-check: ok" in r.stdout
    # an argument (it takes none) is refused with one line before anything runs
    r = run_bounded(["bash", "jobs/check.sh", "--frob"], cwd=REPO, env=dict(os.environ),
                    timeout=60)
    assert r.returncode == 2, r.stdout            # stdout and stderr together
    assert r.stdout.startswith("jobs/check.sh: error: takes no arguments, got: --frob") \
        and r.stdout.count("\n") == 1, r.stdout


def test_render_fills_directives_and_validates(tmp_path):
    pbs = jobs.render(scheduler="pbs", nodes=256, config=CONFIG, group="gab12345",
                      overrides=["train.global_batch=81920", "mlperf.org=a b"])
    assert "#PBS -l select=256:mpiprocs=8\n" in pbs and "#PBS -q rt_HF\n" in pbs
    assert "#PBS -P gab12345\n" in pbs and re.search(r"^#PBS -l walltime=\d+:\d\d:00$", pbs, re.M)
    assert "YASGD_RENDERED_ARGS=(train.global_batch=81920 'mlperf.org=a b')" in pbs
    assert f'if [ -z "${{YASGD_HOME:-}}" ]; then YASGD_HOME={shlex.quote(REPO)}; fi\n' in pbs
    uge = jobs.render(scheduler="uge", nodes=512, config=CONFIG, walltime="0:05:00",
                      group="gab12345", overrides=["train.global_batch=81920"])
    assert "#$ -l rt_F=512\n" in uge and "#$ -l h_rt=0:05:00\n" in uge
    assert "2048 rank(s), 40 image(s) per rank" in uge
    assert jobs.submit_command(uge, "uge", "job.sh") == ["qsub", "-g", "gab12345", "job.sh"]
    slurm = jobs.render(scheduler="slurm", nodes=2, gpus_per_node=4, config=CONFIG,
                        walltime="90", queue="gpu")
    for line in ("--nodes=2", "--ntasks-per-node=4", "--gpus-per-node=4", "--time=1:30:00",
                 "--partition=gpu"):
        assert f"#SBATCH {line}\n" in slurm
    # Directives stay above the first command (qsub/sbatch stop reading there).
    for text, tag in ((pbs, "#PBS"), (uge, "#$"), (slurm, "#SBATCH")):
        first_cmd = min(i for i, l in enumerate(text.splitlines()) if l and not l.startswith("#"))
        assert all(i < first_cmd for i, l in enumerate(text.splitlines()) if l.startswith(tag + " "))
    bad = [dict(nodes=0), dict(nodes=3, overrides=[]), dict(gpus_per_node=0),
           dict(walltime="1h"), dict(walltime=""), dict(walltime="1:61:00"),
           dict(walltime="8761:00:00"), dict(walltime="100000:00"), dict(group="a;b"), dict(config="missing.yaml"),
           dict(overrides=["train.nope=1"])]
    for kw in bad:
        args = dict(scheduler="pbs", nodes=1, config=CONFIG)
        args.update(kw)
        with pytest.raises(UsageError):
            jobs.render(**args)
    with pytest.raises(UsageError):
        jobs.render(scheduler="lsf", nodes=1, config=CONFIG)


def test_submit_without_scheduler_and_dry_run(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no qsub, no sbatch
    script = jobs.render(scheduler="slurm", nodes=1, config=CONFIG)
    with pytest.raises(UsageError, match="sbatch"):
        jobs.submit(script, scheduler="slurm")
    with pytest.raises(UsageError, match="qsub"):
        jobs.submit(jobs.render(scheduler="pbs", nodes=1, config=CONFIG), scheduler="pbs")
    with pytest.raises(UsageError, match="group"):  # UGE needs qsub -g GROUP
        jobs.submit(jobs.render(scheduler="uge", nodes=1, config=CONFIG), scheduler="uge")
    out = tmp_path / "job.sh"
    uge = jobs.render(scheduler="uge", nodes=1, config=CONFIG, group="gab12345")
    assert jobs.submit(uge, scheduler="uge", output=str(out), dry_run=True) == 0
    assert f"would run: qsub -g gab12345 {out}" in capsys.readouterr().out
    assert out.read_text() == uge
    # A stand-in qsub on PATH: the script arrives, the exit status comes back.
    fake = tmp_path / "qsub"
    fake.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path}/args\n/bin/cat > {tmp_path}/stdin\nexit 3\n")
    fake.chmod(0o755)
    pbs = jobs.render(scheduler="pbs", nodes=1, config=CONFIG)
    assert jobs.submit(pbs, scheduler="pbs") == 3
    assert (tmp_path / "stdin").read_text() == pbs


# -- 2. PBS (ABCI 3.0), environment faked -------------------------------------------
def test_pbs_script_runs_tiny_training(tmp_path):
    nodefile = tmp_path / "aux" / "123.pbs1"
    nodefile.parent.mkdir()
    nodefile.write_text(f"{HOST}\n{HOST}\n")  # select=1:mpiprocs=2
    # PBS runs a copy of the script from its spool, in the user's home.
    spool, home = tmp_path / "spool", tmp_path / "home"
    spool.mkdir(), home.mkdir()
    script = spool / "123.pbs1.SC"
    shutil.copy(os.path.join(REPO, "jobs/abci/pbs/train.sh"), script)
    env = job_env(tmp_path, PBS_NODEFILE=str(nodefile), PBS_O_WORKDIR=REPO, PBS_JOBID="123.pbs1",
                  PBS_JOBNAME="yasgd", PBS_QUEUE="rt_HF", PBS_ENVIRONMENT="PBS_BATCH",
                  PBS_O_HOST=HOST, HOME=str(home))
    r = run_bounded(["bash", str(script)], cwd=str(home), env=env)
    assert r.returncode == 0, r.stdout[-4000:]
    assert "no 'module' command" in r.stdout
    check_run_dir(r.stdout, tmp_path / "runs", "pbs", "123.pbs1")


# -- 3. UGE (ABCI 2019), environment faked --------------------------------------------
def test_uge_script_runs_tiny_training(tmp_path):
    hostlist = tmp_path / "hostlist"
    hostlist.write_text(f"{HOST}\n{HOST}\n")
    spool = tmp_path / "spool"
    spool.mkdir()
    script = spool / "job_script"
    shutil.copy(os.path.join(REPO, "jobs/abci/uge/train.sh"), script)
    # `#$ -cwd`: the job starts where qsub ran (the repository).
    env = job_env(tmp_path, SGE_JOB_HOSTLIST=str(hostlist), NHOSTS="2", JOB_ID="4242",
                  JOB_NAME="yasgd", SGE_O_WORKDIR=REPO, SGE_TASK_ID="undefined")
    r = run_bounded(["bash", str(script)], cwd=REPO, env=env)
    assert r.returncode == 0, r.stdout[-4000:]
    check_run_dir(r.stdout, tmp_path / "runs", "uge", "4242")


def test_uge_script_exits_with_failure_status(tmp_path):
    """A bad override stops the job before MPI with status 2; a failing rank
    makes the job exit with mpirun's non-zero status."""
    hostlist = tmp_path / "hostlist"
    hostlist.write_text(f"{HOST}\n{HOST}\n")
    base = dict(SGE_JOB_HOSTLIST=str(hostlist), NHOSTS="2")
    r = run_bounded(["bash", "jobs/abci/uge/train.sh", "train.nope=1"], cwd=REPO,
                    env=job_env(tmp_path, JOB_ID="1", **base), timeout=120)
    assert r.returncode == 2, r.stdout[-3000:]
    assert "unknown config key train.nope" in r.stdout
    # mpirun's grace at 2 s: after a failed rank it waits about twice the grace before it
    # exits, and the scripts' 10 s default would only add that wait here
    r = run_bounded(["bash", "jobs/abci/uge/train.sh"], cwd=REPO, timeout=120,
                    env=job_env(tmp_path, JOB_ID="2", YASGD_TRAIN_CMD=f"{PYTHON} -c exit(7)",
                                OMPI_MCA_odls_base_sigkill_timeout="2", **base))
    assert r.returncode == 7, r.stdout[-3000:]
    assert (next((tmp_path / "runs").glob("tiny-uge-2*")) / "exit_status").read_text().strip() == "7"


@pytest.mark.parametrize("script", ["jobs/abci/pbs/train.sh", "jobs/abci/uge/train.sh",
                                    "jobs/slurm/train.sbatch"])
def test_a_yasgd_home_that_is_not_the_repository_is_one_line(tmp_path, script):
    """Each script sources the repository's scripts first: a wrong YASGD_HOME is the job's
    own one line and status 2, not bash's 'No such file or directory'."""
    r = run_bounded(["bash", os.path.join(REPO, script)], cwd=str(tmp_path), timeout=60,
                    env=job_env(tmp_path, YASGD_HOME=str(tmp_path)))
    assert r.returncode == 2, r.stdout[-3000:]
    assert r.stdout == (f"[yasgd-job] error: YASGD_HOME={tmp_path} is not the yasgd repository "
                        f"(no jobs/lib.sh): submit from it or set YASGD_HOME\n"), r.stdout


@pytest.mark.parametrize("name,value,why", [
    ("YASGD_PREFLIGHT", "no", "YASGD_PREFLIGHT must be 1 (run the preflight) or 0 (skip it), "
                              "got 'no'"),
    ("YASGD_PREFLIGHT_TIMEOUT", "abc", "YASGD_PREFLIGHT_TIMEOUT must be a finite number of "
                                       "seconds in (0, 31536000], got 'abc'"),
    ("YASGD_PREFLIGHT_TIMEOUT", "0", "YASGD_PREFLIGHT_TIMEOUT must be a finite number of "
                                     "seconds in (0, 31536000], got '0'"),
    ("YASGD_HOST_KIND", "GPU", "YASGD_HOST_KIND must be cpu or gpu, got GPU"),
    ("YASGD_LAUNCHER", "foo", "YASGD_LAUNCHER must be srun, mpirun or auto, got 'foo'"),
    # a host list the scheduler names but that is not there: not one host alone, silently
    ("SGE_JOB_HOSTLIST", "/nonexistent-yasgd/hosts",
     "host list /nonexistent-yasgd/hosts (from the scheduler) is not a file"),
])
def test_job_settings_are_checked_before_anything_is_made(tmp_path, name, value, why):
    """Not once a rank after MPI starts: one line, status 2, no run directory."""
    hostlist = tmp_path / "hostlist"
    hostlist.write_text(f"{HOST}\n{HOST}\n")
    env = job_env(tmp_path, SGE_JOB_HOSTLIST=str(hostlist), NHOSTS="2", JOB_ID="5")
    env[name] = value
    r = run_bounded(["bash", "jobs/abci/uge/train.sh"], cwd=REPO, timeout=60, env=env)
    assert r.returncode == 2, r.stdout[-3000:]
    errors = [ln for ln in r.stdout.splitlines() if "error" in ln]
    assert errors == [f"[yasgd-job] error: {why}"], r.stdout[-3000:]
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())


# -- 4. Slurm, for real -----------------------------------------------------------------
def test_slurm_script_runs_tiny_training(tmp_path, local_slurm):  # noqa: F811
    script = tmp_path / "job.sbatch"
    script.write_text(jobs.render(scheduler="slurm", nodes=1, gpus_per_node=2, config=CONFIG,
                                  walltime="0:10:00"))
    submit = tmp_path / "submit"
    submit.mkdir()
    env = job_env(tmp_path)
    job = local_slurm.sbatch(str(script), cwd=str(submit), env=env)
    state, code = local_slurm.wait(job, timeout=JOB_TIMEOUT)
    out_file = submit / f"yasgd-{job}.out"
    output = out_file.read_text() if out_file.exists() else "(no output file)"
    assert (state, code) == ("COMPLETED", 0), output[-4000:] + local_slurm.logs()
    assert f"slurm job {job}: 1 node(s), 2 rank(s)" in output
    assert "mpirun exited with status 0" in output
    check_run_dir(output, tmp_path / "runs", "slurm", job)


def test_slurm_job_exit_status_is_mpiruns(tmp_path, local_slurm):  # noqa: F811
    script = tmp_path / "job.sbatch"
    script.write_text(jobs.render(scheduler="slurm", nodes=1, gpus_per_node=2, config=CONFIG,
                                  walltime="0:05:00"))
    env = job_env(tmp_path, YASGD_TRAIN_CMD=f"{PYTHON} -c exit(5)",
                  OMPI_MCA_odls_base_sigkill_timeout="2")   # as in the UGE test above
    job = local_slurm.sbatch(str(script), cwd=str(tmp_path), env=env)
    state, code = local_slurm.wait(job, timeout=120)
    output = (tmp_path / f"yasgd-{job}.out").read_text()
    assert (state, code) == ("FAILED", 5), output[-3000:]
    assert "mpirun exited with status 5" in output


def test_scancel_checkpoints_and_exits_143(tmp_path, local_slurm):  # noqa: F811
    """scancel (SIGTERM to every process of the job, KillWait 30 s before SIGKILL): the
    ranks stop together with a checkpoint, the job script waits for them and exits 143."""
    long = ["train.epochs=60", "train.max_steps=0", "train.checkpoint_every=1",
            "train.eval_every=100"]
    script = tmp_path / "job.sbatch"
    script.write_text(jobs.render(scheduler="slurm", nodes=1, gpus_per_node=2, config=CONFIG,
                                  walltime="0:10:00", overrides=long))
    job = local_slurm.sbatch(str(script), cwd=str(tmp_path), env=job_env(tmp_path))
    out_file = tmp_path / f"yasgd-{job}.out"
    deadline = time.time() + JOB_TIMEOUT
    while time.time() < deadline and not re.search(
            r"^epoch +2/60", out_file.read_text() if out_file.exists() else "", re.M):
        time.sleep(0.5)
    local_slurm._run("scancel", job)
    t0 = time.time()
    state, code = local_slurm.wait(job, timeout=120)
    took = time.time() - t0
    output = out_file.read_text()
    assert state == "CANCELLED", output[-4000:] + local_slurm.logs()
    assert "Traceback" not in output, output[-4000:]
    job_dir = next((tmp_path / "runs").glob(f"tiny-slurm-{job}*"))
    assert (job_dir / "exit_status").read_text().strip() == "143", output[-4000:]
    # mpirun, signalled too, may drop the ranks' last lines; the job script's line stays
    m = re.search(r"^\[yasgd-job\] stopped by SIGTERM with checkpoint (\S+) \(exit status 143\);"
                  r" continue with run.resume=auto", output, re.M)
    assert m, output[-4000:]
    from yasgd import checkpoint
    checkpoint.verify(m.group(1), deep=True)
    assert os.path.dirname(os.path.dirname(m.group(1))) == str(job_dir)
    assert took < 30, f"{took:.1f} s"
    print(f"\nscancel: {m.group(0)} ({took:.1f} s)")


# -- rank layout on real clusters (GPU nodes faked) --------------------------------------
def _fake_tools(tmp_path, gpus: int):
    """nvidia-smi listing `gpus` GPUs and a numactl that reports how it was called."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\ncase \"$1\" in\n"
                   f"  -L) i=0; while [ $i -lt {gpus} ]; do echo \"GPU $i: Fake (UUID: GPU-$i)\"; "
                   "i=$((i+1)); done ;;\n"
                   "  *) echo 00000000:FF:1F.7 ;;\nesac\n")
    numactl = bin_dir / "numactl"
    numactl.write_text("#!/bin/sh\necho \"numactl $1 $2\"\nshift 2\nexec \"$@\"\n")
    for f in (smi, numactl):
        f.chmod(0o755)
    return f"{bin_dir}:{os.environ['PATH']}"


@pytest.mark.parametrize("local_rank,numa,hca", [(0, "0", "mlx5_0"), (1, "0", "mlx5_0"),
                                                 (2, "1", "mlx5_1"), (3, "1", "mlx5_1")])
def test_bind_places_rank_on_its_gpu_numa_node_and_hca(tmp_path, local_rank, numa, hca):
    """ABCI 2019 layout: 4 GPUs, 2 NUMA nodes, 2 HCAs; GPUs 0-1 on the first."""
    env = dict(os.environ, PATH=_fake_tools(tmp_path, 4), OMPI_COMM_WORLD_LOCAL_RANK=str(local_rank),
               OMPI_COMM_WORLD_LOCAL_SIZE="4", OMPI_COMM_WORLD_RANK=str(4 + local_rank),
               YASGD_NUMA_NODES="0 1", YASGD_HCAS="mlx5_0 mlx5_1", YASGD_BIND_CUDA_VISIBLE="1")
    env.pop("NCCL_IB_HCA", None)
    env.pop("UCX_NET_DEVICES", None)
    r = run_bounded(["bash", "jobs/bind.sh", "sh", "-c",
                     'echo "cvd=$CUDA_VISIBLE_DEVICES nccl=$NCCL_IB_HCA ucx=$UCX_NET_DEVICES"'],
                    cwd=REPO, env=env, timeout=30)
    assert r.returncode == 0, r.stdout
    assert f"numactl --cpunodebind={numa} --membind={numa}" in r.stdout
    assert f"cvd={local_rank} nccl={hca} ucx={hca}:1" in r.stdout
    assert f"[bind] rank {4 + local_rank} local {local_rank}/4" in r.stdout
    assert f"gpu {local_rank}, numa {numa}, hca {hca}" in r.stdout


def test_bind_without_binding_runs_the_command_as_is(tmp_path):
    env = dict(os.environ, YASGD_BIND="0", OMPI_COMM_WORLD_LOCAL_RANK="1")
    r = run_bounded(["bash", "jobs/bind.sh", "sh", "-c", "exit 9"], cwd=REPO, env=env, timeout=30)
    assert r.returncode == 9 and "[bind]" not in r.stdout


def _lib(tmp_path, body: str, **env_extra) -> str:
    env = {k: v for k, v in os.environ.items() if k != "YASGD_GPUS_PER_NODE"}
    env.update(env_extra)
    r = run_bounded(["bash", "-c", f"set -euo pipefail; . jobs/lib.sh; {body}"], cwd=REPO,
                    env=env, timeout=30)
    assert r.returncode == 0, r.stdout
    return r.stdout


def test_ranks_per_node_follow_the_gpus(tmp_path):
    """PBS lists a node once per mpiprocs, UGE once: with GPUs every node gets
    one rank per GPU; without, one rank per line of the host list."""
    pbs = tmp_path / "pbs_nodefile"
    pbs.write_text("".join(f"{h}\n" for h in ["a"] * 8 + ["b"] * 8))
    uge = tmp_path / "sge_hostlist"
    uge.write_text("a\nb\nc\n")
    show = ('h=$(yasgd_hostfile "$1" "$1" "$(yasgd_gpus_per_node)"); yasgd_world "$h"; '
            'echo "np=$YASGD_NP nodes=$YASGD_NNODES"; printf "%s\\n" "$h"')
    gpu8 = _lib(tmp_path, f"set -- {pbs} {tmp_path}/h1; {show}", PATH=_fake_tools(tmp_path, 8))
    assert "np=16 nodes=2" in gpu8 and "a slots=8\nb slots=8\n" in gpu8
    gpu4 = _lib(tmp_path, f"set -- {uge} {tmp_path}/h2; {show}", PATH=_fake_tools(tmp_path, 4))
    assert "np=12 nodes=3" in gpu4 and "a slots=4\nb slots=4\nc slots=4\n" in gpu4
    cpu = _lib(tmp_path, f"set -- {uge} {tmp_path}/h3; {show}", PATH=_fake_tools(tmp_path, 0))
    assert "np=3 nodes=3" in cpu and "a slots=1\n" in cpu
    forced = _lib(tmp_path, f"set -- {pbs} {tmp_path}/h4; {show}", YASGD_GPUS_PER_NODE="2")
    assert "np=4 nodes=2" in forced


def test_slurm_host_list_expands_tasks_per_node(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    scontrol.write_text("#!/bin/sh\nprintf 'n1\\nn2\\nn3\\nn4\\n'\n")
    scontrol.chmod(0o755)
    out = _lib(tmp_path, f'yasgd_slurm_hostlist {tmp_path}/list; sort {tmp_path}/list | uniq -c',
               PATH=f"{bin_dir}:{os.environ['PATH']}", SLURM_JOB_NODELIST="n[1-4]",
               SLURM_TASKS_PER_NODE="8(x3),4")
    counts = dict(reversed(line.split()) for line in out.strip().splitlines())
    assert counts == {"n1": "8", "n2": "8", "n3": "8", "n4": "4"}
