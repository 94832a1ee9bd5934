"""Rendered job scripts with hostile values: nothing a user types may run as a
command, and every value must reach the training exactly as typed.

The corpus (command substitution, backticks, `;`, both quotes, blanks, globs,
braces, a backslash, typographic quotes) goes into the config file's name and
directory, into string-valued overrides, into YASGD_ARGS and into the script's
arguments. Each command in it would create a marker file; no marker may appear
in the working directory, the repository, /tmp or the test's folder. Checked:
the prelude of every rendered script (the values it sets, read back by bash),
`bash -n` and shellcheck on the scripts, PBS, UGE and Slurm jobs under their
faked environments with a stand-in training that records its argv, and one real
tiny 2-rank training per scheduler. The CLI refuses a newline, hostile
directive values and unusable output paths with exit status 2 and one line.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import uuid

import pytest
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_jobs import HOST, PYTHON, REPO, job_env, run_bounded  # noqa: E402

sys.path.insert(0, REPO)
from yasgd import UsageError, jobs  # noqa: E402

TINY = os.path.join(REPO, "examples/configs/tiny.yaml")
SCHEDULERS = ("pbs", "uge", "slurm")
# fresh for each pytest run, and one for all its pytest-xdist workers (their test ids name it,
# and the workers must collect the same ids)
MARK = "pwn" + (os.environ.get("PYTEST_XDIST_TESTRUNUID") or uuid.uuid4().hex)[:6]
MARK_RE = re.compile(re.escape(MARK) + r"(\.\w+)?")


def corpus(mark: str = MARK):
    """Hostile fragments, each legal in a file name (no '/', no newline)."""
    return [f"$(touch {mark}.a)", f"`touch {mark}.b`", f";touch {mark}.c", f"&& touch {mark}.d",
            f"' ;touch {mark}.e; '", f'" ;touch {mark}.f; "', f"$'\\x3b'touch {mark}.g",
            "two  spaces", "*", "[a-z]?*", "{x,y}", "~", "\\", "$HOME ${IFS}", "‘’“”", "\ttab",
            "|>< !#%^ -n"]


HOSTILE_ORG = " ".join(["x"] + corpus())   # a string key's value (YAML reads it back as is)
PLATFORM = f"p$(touch${{IFS}}{MARK}.h)*"    # no blank: one word of YASGD_ARGS
GLOBBY = f"mlperf.platform={PLATFORM}"


def assert_no_markers(tmp_path, *more):
    """No marker under the test's folders, nor in the repository or /tmp."""
    found = []
    for top in (str(tmp_path),) + tuple(map(str, more)):
        for root, _dirs, files in os.walk(top):
            found += [os.path.join(root, f) for f in files if MARK_RE.fullmatch(f)]
    for d in (REPO, os.path.join(REPO, "jobs"), "/tmp"):
        found += [os.path.join(d, f) for f in os.listdir(d) if MARK_RE.fullmatch(f)]
    assert not found, f"a hostile value ran as a command: {found}"


# For a file name (at most 255 bytes): the corpus less its longest entries.
NAME_FRAGMENT = " ".join(c for c in corpus() if not c.startswith(("&", "'", '"', "|")))


def hostile_config(tmp_path, fragment: str = NAME_FRAGMENT) -> str:
    """tiny.yaml copied to a file (in a folder) whose names hold the corpus."""
    folder = tmp_path / f"dir $(touch {MARK}.dir) ;x '\""
    folder.mkdir(exist_ok=True)
    path = folder / f"cfg {fragment}.yaml"
    shutil.copy(TINY, path)
    return str(path)


def prelude(script: str) -> str:
    begin, end = script.index(jobs.BEGIN), script.index(jobs.END)
    return script[begin:end]


def read_prelude(script: str, tmp_path, env=None) -> list:
    """YASGD_HOME, YASGD_CONFIG and YASGD_RENDERED_ARGS as bash sets them."""
    f = tmp_path / "prelude.sh"
    f.write_text(prelude(script))
    base = {k: v for k, v in os.environ.items() if k not in ("YASGD_HOME", "YASGD_CONFIG")}
    r = subprocess.run(["bash", "-c", 'set -euo pipefail; . "$1"; printf "%s\\0" "$YASGD_HOME" '
                        '"$YASGD_CONFIG" "${YASGD_RENDERED_ARGS[@]}"', "prelude", str(f)],
                       cwd=str(tmp_path), env=dict(base, **(env or {})), capture_output=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout.decode().split("\0")[:-1]


# -- the values a rendered script sets --------------------------------------------------
@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_prelude_holds_every_value_exactly(tmp_path, scheduler):
    scripts = []
    for i, fragment in enumerate(corpus()):
        config = hostile_config(tmp_path, f"{i} {fragment}")
        overrides = [f"mlperf.org=x{fragment}", "run.name=a+b.c_d-e", f"mlperf.platform=x {fragment}"]
        script = jobs.render(scheduler=scheduler, nodes=1, gpus_per_node=2, config=config,
                             walltime="0:10:00", overrides=overrides)
        assert read_prelude(script, tmp_path) == [REPO, config] + overrides
        # The header comment is one line, whatever the values hold.
        lines = script.splitlines()
        h = next(n for n, line in enumerate(lines) if line.startswith("# Rendered by:"))
        assert jobs.one_line(shlex.join(overrides)) in lines[h]
        assert lines[h + 1] == f"# from {jobs.TEMPLATES[scheduler]}"
        scripts.append(script)
    # The environment's values win, and are not evaluated either.
    env_config = f"from env $(touch {MARK}.env) '\""
    got = read_prelude(scripts[0], tmp_path, env={"YASGD_CONFIG": env_config, "YASGD_HOME": "/h ;x"})
    assert got[:2] == ["/h ;x", env_config]
    # bash -n and shellcheck (which follows lib.sh and common.sh) on every script.
    paths = []
    for n, script in enumerate(scripts):
        paths.append(str(tmp_path / f"job{n}.sh"))
        with open(paths[-1], "w") as f:
            f.write(script)
        r = subprocess.run(["bash", "-n", paths[-1]], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    if shutil.which("shellcheck") is None:
        pytest.fail("shellcheck is not installed (apt-get install shellcheck)")
    r = subprocess.run(["shellcheck", "-x", "-P", REPO] + paths, cwd=REPO, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-4000:]
    assert_no_markers(tmp_path)


def test_helpers_quote_and_one_line():
    for value in corpus() + ["", "plain", "a'b", "'", "\r\x1b"]:
        r = subprocess.run(["bash", "-c", f"printf %s {jobs.shell_word(value)}"], capture_output=True)
        assert r.stdout.decode() == value
    assert jobs.one_line("a\nb\r\tc\x1b") == "a\\nb\\r\\tc\\x1b"
    assert "\n" not in jobs.one_line("\n\u2028\x85")


def test_lib_split_expands_nothing(tmp_path):
    """YASGD_ARGS and YASGD_TRAIN_CMD are split on blanks, with no glob or `$`."""
    for name in ("a", "b", "mlperf.org=q"):
        (tmp_path / name).write_text("")
    text = f"* mlperf.org=* $(touch {MARK}.s) `touch {MARK}.t` a\\b '\"x\"' ${{HOME}}\n\tlast"
    r = subprocess.run(["bash", "-c", f'set -euo pipefail; . {shlex.quote(REPO)}/jobs/lib.sh; '
                        'yasgd_split "$1"; printf "%s\\0" "${YASGD_WORDS[@]}"', "t", text],
                       cwd=str(tmp_path), capture_output=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().split("\0")[:-1] == text.split()
    assert_no_markers(tmp_path)


# -- jobs under faked schedulers ------------------------------------------------------------
def fake_scheduler(tmp_path, scheduler: str, script: str):
    """(argv, cwd, env) of the job as the scheduler would start it here."""
    submit = tmp_path / f"submit $(touch {MARK}.w) ;x"
    submit.mkdir(exist_ok=True)
    hosts = tmp_path / "hosts"
    hosts.write_text(f"{HOST}\n{HOST}\n")
    path = tmp_path / {"pbs": "123.pbs1.SC", "uge": "job_script", "slurm": "job.sbatch"}[scheduler]
    path.write_text(script)
    env = job_env(tmp_path, YASGD_ARGS=f"{GLOBBY} data.limit=2048")
    env.pop("YASGD_CONFIG")  # the rendered config, not test_jobs' default
    env.pop("YASGD_TRAIN_CMD", None)
    if scheduler == "pbs":
        env.update(PBS_NODEFILE=str(hosts), PBS_O_WORKDIR=str(submit), PBS_JOBID="123.pbs1",
                   PBS_ENVIRONMENT="PBS_BATCH", HOME=str(submit))
        job_id = "123.pbs1"
    elif scheduler == "uge":
        env.update(SGE_JOB_HOSTLIST=str(hosts), NHOSTS="2", JOB_ID="4242", SGE_O_WORKDIR=str(submit))
        job_id = "4242"
    else:
        # scontrol stands in for Slurm's host-list expansion; no SLURM_JOB_ID, so
        # that mpirun does not look for a real allocation.
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir(exist_ok=True)
        (bin_dir / "scontrol").write_text(f"#!/bin/sh\necho {HOST}\n")
        (bin_dir / "scontrol").chmod(0o755)
        env.update(PATH=f"{bin_dir}:{env['PATH']}", SLURM_JOB_NODELIST=HOST,
                   SLURM_TASKS_PER_NODE="2", SLURM_SUBMIT_DIR=str(submit))
        job_id = "local-"
    return ["bash", str(path)], str(submit), env, job_id


def job_dir_of(tmp_path, scheduler: str, job_id: str):
    dirs = [d for d in (tmp_path / "runs").iterdir() if f"-{scheduler}-{job_id}" in d.name]
    assert len(dirs) == 1, dirs
    assert re.fullmatch(r"[A-Za-z0-9._+-]+", dirs[0].name), dirs[0].name
    return dirs[0]


def render_hostile(tmp_path, scheduler: str):
    config = hostile_config(tmp_path)
    overrides = ["run.name=a+b.c_d-e", f"mlperf.org={HOSTILE_ORG}",
                 f"mlperf.org={HOSTILE_ORG.replace('x ', 'y ', 1)}", f"mlperf.org={HOSTILE_ORG}"]
    script = jobs.render(scheduler=scheduler, nodes=1, gpus_per_node=2, config=config,
                         walltime="0:10:00", overrides=overrides)
    return config, overrides, script


RECORDER = """import json, os, sys
rank = os.environ.get("OMPI_COMM_WORLD_RANK", "x")
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), f"argv.{rank}.json"), "w") as f:
    json.dump(sys.argv[1:], f)
"""


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_job_passes_every_value_exactly(tmp_path, scheduler):
    """The stand-in training on each rank records its argv: config, rendered
    overrides, YASGD_ARGS, the script's arguments, run.dir, word for word."""
    config, overrides, script = render_hostile(tmp_path, scheduler)
    cmd, cwd, env, job_id = fake_scheduler(tmp_path, scheduler, script)
    rec = tmp_path / "rec"
    rec.mkdir()
    (rec / "recorder.py").write_text(RECORDER)
    (rec / "a").write_text("")  # `rec/*` would match it, were it expanded
    env["YASGD_TRAIN_CMD"] = f"{PYTHON} {rec}/recorder.py {rec}/*"
    script_args = [f"mlperf.platform=q {c}" for c in corpus()[:6]] + ["mlperf.org=*"]
    r = run_bounded(cmd + script_args, cwd=cwd, env=env, timeout=180)
    assert r.returncode == 0, r.stdout[-4000:]
    job_dir = job_dir_of(tmp_path, scheduler, job_id)
    expected = ([f"{rec}/*", config] + overrides + [GLOBBY, "data.limit=2048"] + script_args
                + [f"run.dir='{job_dir}'"])      # quoted for YAML: a path is text
    for rank in (0, 1):
        assert json.loads((rec / f"argv.{rank}.json").read_text()) == expected
    # command.sh and job.txt hold the same values, %q-quoted.
    words = subprocess.run(["bash", "-c", 'eval "w=($(cat "$1"))"; printf "%s\\0" "${w[@]}"', "x",
                            str(job_dir / "command.sh")], capture_output=True, timeout=30)
    assert words.stdout.decode().split("\0")[:-1][-len(expected):] == expected
    job_txt = (job_dir / "job.txt").read_text()
    line = next(x for x in job_txt.splitlines() if x.startswith("config="))
    got = subprocess.run(["bash", "-c", f"printf %s {line[len('config='):]}"], capture_output=True)
    assert got.stdout.decode() == config
    assert_no_markers(tmp_path, cwd)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_hostile_job_trains_with_the_intended_config(tmp_path, scheduler):
    """One real tiny 2-rank training: its config holds the hostile strings."""
    config, overrides, script = render_hostile(tmp_path, scheduler)
    cmd, cwd, env, job_id = fake_scheduler(tmp_path, scheduler, script)
    r = run_bounded(cmd, cwd=cwd, env=env)
    assert r.returncode == 0, r.stdout[-4000:]
    job_dir = job_dir_of(tmp_path, scheduler, job_id)
    assert (job_dir / "exit_status").read_text().strip() == "0"
    m = re.search(r"^run directory: (.+)$", r.stdout, re.M)
    assert m, r.stdout[-3000:]
    train_dir = m.group(1)
    assert os.path.dirname(train_dir) == str(job_dir)
    assert os.path.basename(train_dir).startswith("a+b.c_d-e-")
    for path in (os.path.join(train_dir, "config.yaml"), job_dir / "config.yaml"):
        with open(path) as f:
            cfg = yaml.safe_load(f)
        assert cfg["mlperf"]["org"] == HOSTILE_ORG and cfg["mlperf"]["platform"] == PLATFORM
        assert cfg["run"]["dir"] == str(job_dir) and cfg["model"]["name"] == "resnet8"
    assert "[bind] rank 1 local 1/2" in (job_dir / "job.log").read_text()
    assert_no_markers(tmp_path, cwd)


# -- the CLI refuses what a script cannot carry ----------------------------------------------
def cli(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=REPO)
    return subprocess.run([PYTHON, "-m", "yasgd.cli", "jobs", *args], cwd=cwd or REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def assert_usage_error(r, *words):
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("yasgd: error: "), r.stderr
    for w in words:
        assert w in lines[0], lines[0]


BASE = ("--nodes", "1", "--config", TINY)


@pytest.mark.parametrize("scheduler,option,value", [
    (s, o, v) for s in SCHEDULERS for o, v in (
        ("--group", f"g;touch {MARK}"), ("--group", "-x"), ("--group", "g b"), ("--group", "g\nb"),
        ("--queue", f"$(touch {MARK})"), ("--queue", "q#x"), ("--queue", "q=1"),
        ("--walltime", f"1:00:00;touch {MARK}"), ("--walltime", "1:00:00\n#PBS -q x"))
] + [("pbs", "--group", "g'a"), ("uge", "--queue", "rt_F,x"), ("slurm", "--queue", "a,,b"),
     ("slurm", "--group", "a,b")])
def test_cli_refuses_hostile_directive_values(tmp_path, scheduler, option, value):
    r = cli("render", "--scheduler", scheduler, *BASE, f"{option}={value}", cwd=str(tmp_path))
    assert_usage_error(r, option)
    assert r.stdout == ""
    assert_no_markers(tmp_path)


def test_cli_accepts_plain_directive_values(tmp_path):
    for scheduler, group, queue in (("pbs", "gab12345", "rt_HF@pbs1.abci"), ("uge", "gab12345", "rt_G.small"),
                                    ("slurm", "proj_1", "gpu,gpu-long")):
        r = cli("render", "--scheduler", scheduler, *BASE, "--group", group, "--queue", queue)
        assert r.returncode == 0, r.stderr
        assert group in r.stdout and queue in r.stdout


@pytest.mark.parametrize("override", ["mlperf.org=a\nb", "run.name=a\n#PBS -q evil",
                                      f"mlperf.org=x\ntouch {MARK}"])
def test_cli_refuses_a_newline_in_an_override(tmp_path, override):
    r = cli("render", "--scheduler", "pbs", *BASE, override, cwd=str(tmp_path))
    assert_usage_error(r, "override", "holds a line break or NUL")
    assert r.stdout == ""
    assert_no_markers(tmp_path)
    with pytest.raises(UsageError, match="NUL"):
        jobs.render(scheduler="pbs", nodes=1, gpus_per_node=2, config=TINY,
                    overrides=["mlperf.org=a\x00b"])


def test_cli_refuses_a_newline_in_the_config_path(tmp_path):
    bad = tmp_path / "a\nb.yaml"
    shutil.copy(TINY, bad)
    r = cli("render", "--scheduler", "slurm", "--nodes", "1", "--config", str(bad))
    assert_usage_error(r, "--config", "newline")


def test_cli_output_paths(tmp_path):
    # A directory: the script goes inside it, under the scheduler's default name.
    for scheduler, name in (("pbs", "job.sh"), ("uge", "job.sh"), ("slurm", "job.sbatch")):
        out = tmp_path / scheduler
        out.mkdir()
        r = cli("render", "--scheduler", scheduler, *BASE, "-o", str(out))
        assert r.returncode == 0, r.stderr
        assert (out / name).read_text().startswith("#!/bin/bash\n")
        assert str(out / name) in r.stderr and r.stdout == ""
    r = cli("submit", "--scheduler", "pbs", *BASE, "--dry-run", "-o", str(tmp_path / "pbs"))
    assert r.returncode == 0 and f"would run: qsub {tmp_path / 'pbs' / 'job.sh'}" in r.stdout
    # Unusable paths: one line, exit 2, nothing written.
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "job.sh").mkdir()      # DIR/job.sh is itself a directory
    os.mkfifo(tmp_path / "fifo")
    bad = [(str(tmp_path / "missing" / "x.sh"), "does not exist"),
           (str(tmp_path / "missing") + "/", "no such directory"),
           (str(tmp_path / "taken"), "not a regular file"),
           (str(tmp_path / "fifo"), "not a regular file"),
           ("/dev/null", "not a regular file"),
           (str(tmp_path / "new\nline.sh"), "newline")]
    if os.path.isdir("/proc"):
        bad.append(("/proc/yasgd-job.sh", "--output"))  # not writable, even for root
    for sub in ("render", "submit"):
        for path, words in bad:
            dry = ["--dry-run"] if sub == "submit" else []     # (render submits nothing)
            r = cli(sub, "--scheduler", "pbs", *BASE, *dry, "-o", path)
            assert_usage_error(r, "--output", words)
            assert r.stdout == ""
    assert not (tmp_path / "missing").exists()
    assert sorted(os.listdir(tmp_path)) == ["fifo", "pbs", "slurm", "taken", "uge"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_cli_output_in_a_read_only_folder(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        r = cli("render", "--scheduler", "pbs", *BASE, "-o", str(ro / "job.sh"))
        assert_usage_error(r, "--output", "not writable")
    finally:
        ro.chmod(0o700)
