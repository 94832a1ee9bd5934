"""What a job script is given by its scheduler and its user, checked before MPI and before
its run directory is made: the host list (each line a host name), Slurm's task counts (read
by a pattern, never evaluated), the job's arguments (overrides only), GPUs per node, the
interpreter, and YASGD_HOME and YASGD_RUNS as a user may set them (a relative repository,
a runs folder with ' #' in its name). The launcher on PATH is a stand-in that records its
arguments and exits 99, so no rank ever starts here."""
from __future__ import annotations

import os
import shlex
import sys

import pytest
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_jobs import REPO, job_env, run_bounded  # noqa: E402

SCRIPTS = {"pbs": "jobs/abci/pbs/train.sh", "uge": "jobs/abci/uge/train.sh",
           "slurm": "jobs/slurm/train.sbatch"}


@pytest.fixture
def fake(tmp_path):
    """(environment, the launcher's record): mpirun and srun that exit 99, scontrol that
    expands any node list to n1 n2."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    for name in ("mpirun", "srun"):
        (bin_dir / name).write_text(f"#!/bin/sh\necho {name} \"$@\" >> {shlex.quote(str(calls))}"
                                    "\nexit 99\n")
    (bin_dir / "scontrol").write_text("#!/bin/sh\necho n1\necho n2\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost\nlocalhost\n")
    env = job_env(tmp_path, PATH=f"{bin_dir}:{os.environ['PATH']}", YASGD_HOME=REPO,
                  YASGD_PREFLIGHT="0", PBS_NODEFILE=str(hosts), PBS_JOBID="1.pbs",
                  PBS_O_WORKDIR=REPO, SGE_JOB_HOSTLIST=str(hosts), NHOSTS="2", JOB_ID="7")
    env.pop("YASGD_TRAIN_CMD", None)
    return env, calls


def _job(tmp_path, env, scheduler, *args, cwd=REPO, script=None):
    r = run_bounded(["bash", script or os.path.join(REPO, SCRIPTS[scheduler]), *args],
                    cwd=cwd, env=env, timeout=120)
    runs = tmp_path / "runs"
    return r, sorted(os.listdir(runs)) if runs.exists() else []


def _refused(r, made, calls, line=None, start="", end=""):
    """Exit 2 with one error line (``line``, or one that starts and ends so), nothing made,
    the launcher never called."""
    errors = [ln[len("[yasgd-job] error: "):] for ln in r.stdout.splitlines() if "error" in ln]
    assert r.returncode == 2 and len(errors) == 1, r.stdout[-2000:]
    assert errors[0] == line if line is not None else (
        errors[0].startswith(start) and errors[0].endswith(end)), errors
    assert made == [] and not calls.exists(), (made, r.stdout[-2000:])


@pytest.mark.parametrize("tasks", ["hosts[$(touch PWNED)]", "counts[$(touch${IFS}PWNED)]",
                                   "2x3", "08", "2(x3", "0", "-1", "abc", "2,,1"])
def test_slurm_task_counts_are_read_by_a_pattern_and_never_run(tmp_path, fake, tasks):
    env, calls = fake
    env.update(SLURM_JOB_ID="13", SLURM_JOB_NODELIST="n[1-2]", SLURM_TASKS_PER_NODE=tasks)
    r, made = _job(tmp_path, env, "slurm", cwd=str(tmp_path))
    _refused(r, made, calls, start="SLURM_TASKS_PER_NODE=",
             end=": each entry must be a task count N or N(xM)")
    assert not (tmp_path / "PWNED").exists()


def test_slurm_task_counts_of_each_form_give_each_node_its_ranks(tmp_path, fake):
    env, calls = fake
    env.update(SLURM_JOB_ID="13", SLURM_JOB_NODELIST="n[1-2]", SLURM_TASKS_PER_NODE="3,1")
    r, made = _job(tmp_path, env, "slurm")
    assert r.returncode == 99, r.stdout[-2000:]
    assert (tmp_path / "runs" / made[0] / "hostfile").read_text() == "n1 slots=3\nn2 slots=1\n"
    env["SLURM_TASKS_PER_NODE"] = "2(x2)"
    r, made = _job(tmp_path, env, "slurm")
    assert (tmp_path / "runs" / made[1] / "hostfile").read_text() == "n1 slots=2\nn2 slots=2\n"


def test_the_slurm_script_outside_slurm_runs_on_this_host(tmp_path, fake):
    env, calls = fake
    r, made = _job(tmp_path, env, "slurm")
    assert r.returncode == 99 and "running on" in r.stdout and "error" not in r.stdout, r.stdout
    assert calls.read_text().startswith("mpirun -np 1 ")


@pytest.mark.parametrize("text,line", [
    ("", "holds no host"),
    ("# only a comment\n\n", "holds no host"),
    ("-np 5\n", "line 1 is not a host name: -np"),
    ("node1\nno\x01de\x00\n", "line 2 is not a host name: no?de?"),
], ids=["empty", "comments", "an-option", "binary"])
@pytest.mark.parametrize("scheduler", ["pbs", "uge"])
def test_a_host_list_without_hosts_stops_before_the_run_directory(tmp_path, fake, scheduler,
                                                                  text, line):
    env, calls = fake
    (tmp_path / "hosts").write_bytes(text.encode())
    r, made = _job(tmp_path, env, scheduler)
    _refused(r, made, calls, f"host list {tmp_path / 'hosts'}" + (" " if line[0] == "h" else ": ")
             + line)


@pytest.mark.parametrize("arg", ["--help", "-h", "--version"])
def test_a_job_argument_that_is_an_option_is_refused(tmp_path, fake, arg):
    env, calls = fake
    r, made = _job(tmp_path, env, "pbs", arg)
    _refused(r, made, calls, f"{arg} is not a section.key=value override (the job's arguments "
                             "and YASGD_ARGS hold overrides only)")
    env["YASGD_ARGS"] = f"train.epochs=1 {arg}"
    r, made = _job(tmp_path, env, "pbs")
    _refused(r, made, calls, f"{arg} is not a section.key=value override (the job's arguments "
                             "and YASGD_ARGS hold overrides only)")


@pytest.mark.parametrize("var,value,line", [
    ("YASGD_LAUNCHER", "srun", "YASGD_LAUNCHER=srun outside a Slurm job"),
    ("YASGD_BIND", "no", "YASGD_BIND must be 1 or 0, got 'no'"),     # bind.sh read it as 1
    ("YASGD_BIND_VERBOSE", "yes", "YASGD_BIND_VERBOSE must be 1 or 0, got 'yes'"),
    ("YASGD_GPUS_PER_NODE", "9" * 20, f"YASGD_GPUS_PER_NODE must be a number 0-9999, got "
                                      f"'{'9' * 20}'"),
])
def test_settings_are_refused_before_the_run_directory(tmp_path, fake, var, value, line):
    env, calls = fake
    env[var] = value
    r, made = _job(tmp_path, env, "pbs")
    _refused(r, made, calls, line)


def test_an_interpreter_without_yasgd_is_one_line(tmp_path, fake):
    env, calls = fake
    py = tmp_path / "python"
    py.write_text("#!/bin/sh\necho 'Traceback (most recent call last):' >&2\n"
                  "echo \"ModuleNotFoundError: No module named 'numpy'\" >&2\nexit 1\n")
    py.chmod(0o755)
    env["YASGD_PYTHON"] = str(py)
    r, made = _job(tmp_path, env, "uge")
    assert "Traceback" not in r.stdout, r.stdout
    _refused(r, made, calls, f"'{py}' cannot import yasgd and the packages it needs (set "
                             f"YASGD_PYTHON to the python of its venv, {REPO}/.venv/bin/python "
                             "after make install)")


@pytest.mark.parametrize("scheduler", ["pbs", "uge"])
def test_a_relative_yasgd_home_and_a_runs_folder_named_with_a_comment_sign(tmp_path, fake,
                                                                           scheduler):
    env, calls = fake
    runs = tmp_path / "a #b: c"
    env.update(YASGD_HOME=os.path.basename(REPO), PBS_O_WORKDIR=str(tmp_path),
               YASGD_RUNS=str(runs))
    r = run_bounded(["bash", os.path.join(os.path.basename(REPO), SCRIPTS[scheduler])],
                    cwd=os.path.dirname(REPO), env=env, timeout=120)
    assert r.returncode == 99 and "error" not in r.stdout, r.stdout[-2000:]
    (job,) = os.listdir(runs)
    config = yaml.safe_load((runs / job / "config.yaml").read_text())
    assert config["run"]["dir"] == str(runs / job), config["run"]


def test_a_config_the_job_refuses_leaves_no_resolved_config(tmp_path, fake):
    env, calls = fake
    r, made = _job(tmp_path, env, "pbs", "train.epochs=0")
    assert r.returncode == 2 and not calls.exists(), r.stdout[-2000:]
    lines = r.stdout.splitlines()
    assert lines[-2].startswith("yasgd: error: config key train.epochs"), lines[-2:]
    assert lines[-1] == (f"[yasgd-job] error: config examples/configs/tiny.yaml train.epochs=0 "
                         f"run.dir='{tmp_path}/runs/{made[0]}' is refused for 2 ranks (the line "
                         f"above says why); run directory: {tmp_path}/runs/{made[0]}"), lines[-1]
    assert sorted(os.listdir(tmp_path / "runs" / made[0])) == [
        "exit_status", "hostfile", "hostlist.orig"]
