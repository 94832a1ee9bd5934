"""What users see first: ``yasgd --help``, and ``yasgd launch`` beside ``python -m
yasgd.launch`` (one code path, yasgd.launch.main) with one-line argument errors."""
import json
import os
import subprocess
import sys

import pytest

from yasgd.bench import study_plan

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
YASGD = os.path.join(os.path.dirname(sys.executable), "yasgd")
LAUNCHERS = {"yasgd launch": [YASGD, "launch"],
             "python -m yasgd.launch": [sys.executable, "-m", "yasgd.launch"]}


def _run(*cmd):
    p = subprocess.run(list(cmd), capture_output=True, text=True, cwd=ROOT, timeout=60)
    return p.returncode, p.stdout, p.stderr


def test_help_speaks_to_users():
    rc, out, err = _run(YASGD, "--help")
    assert rc == 0 and err == ""
    assert "The only argparse" not in out                   # no internal docstring
    assert out.startswith("usage: yasgd ")
    assert "yasgd trains ResNet-50 at large mini-batches with LARS" in out
    for command in ("train", "check-config", "launch", "data", "jobs", "simulate", "bench",
                    "provenance"):
        assert f"\n    {command}" in out, command
    assert "yasgd launch -np N [--timeout S] [--gloo] ... -- COMMAND" in " ".join(out.split())
    assert "README.md" in out and "docs/" in out            # the epilog points further


@pytest.mark.parametrize("name", LAUNCHERS)
def test_launch_help_is_the_launchers(name):
    rc, out, err = _run(*LAUNCHERS[name], "--help")
    assert rc == 0 and err == ""
    assert out.startswith(f"usage: {name} -np N [--timeout S] [--gloo]")
    assert "--no-tuning-defaults" in out and "-- COMMAND" in out


@pytest.mark.parametrize("name", LAUNCHERS)
@pytest.mark.parametrize("args,message", [
    (["-np", "0", "--", "true"], "argument -np: must be an integer >= 1, got '0'"),
    (["-np", "two", "--", "true"], "argument -np: must be an integer >= 1, got 'two'"),
    (["--timeout", "-5", "--", "true"], "argument --timeout: must be a finite number of seconds"),
    (["--timeout", "nan", "--", "true"], "argument --timeout: must be a finite number of seconds"),
    (["--grace", "-1", "--", "true"], "argument --grace: must be an integer number of seconds"),
    (["--stop-timeout", "0", "--", "true"], "argument --stop-timeout: must be a finite number "
                                            "of seconds"),
    (["--stop-timeout", "inf", "--", "true"], "argument --stop-timeout: must be a finite "
                                              "number of seconds"),
    # beyond what a timer takes: refused, not a traceback from threading or the clock
    (["--timeout", "1e300", "--", "true"], "argument --timeout: must be a finite number of "
                                           "seconds in (0, 31536000], got '1e300'"),
    (["--grace", "10" * 12, "--", "true"], "argument --grace: must be an integer number of "
                                           "seconds in [0, 3600]"),
    (["-np", "2"], "no command given"),
    # every rank runs on this host: found (or not) before mpirun starts
    (["-np", "2", "--", "/nonexistent-yasgd"], "command not found or not executable: "
                                               "'/nonexistent-yasgd'"),
    (["-np", "2", "--", "yasgd-no-such-command"], "command not found or not executable"),
    (["--frob", "--", "true"], "unrecognized arguments: --frob"),
    # a cluster job's rank count typed on one host: refused before any rank forks
    (["-np", str(8 * (os.cpu_count() or 1) + 1), "--", "true"],
     f"ranks on this host's {os.cpu_count() or 1} CPU core(s) is more than 8 a core"),
])
def test_launch_argument_errors_are_one_line(name, args, message):
    rc, out, err = _run(*LAUNCHERS[name], *args)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("yasgd: error: launch: "), err
    assert message in err and f"(see {name} --help)" in err


@pytest.mark.parametrize("args,message", [
    (["optimizer", "--arms", "x"], "bench optimizer: --arms applies to bench largebatch and "
                                   "ablation only"),
    (["init", "--max-runs", "1"], "bench init: --max-runs applies to bench largebatch"),
    (["ablation", "--arms", "nope"], "--arms: unknown arm(s) nope (known: baseline, lars-8k,"),
    (["largebatch", "--arms", "baseline,no-warmup"], "--arms: unknown arm(s) no-warmup"),
    (["ablation", "--jobs", "0"], "argument --jobs: must be an integer number of runs in [1, "),
    # each run needs a core: more side by side only oversubscribes (and multiplies the memory)
    (["ablation", "--jobs", str((os.cpu_count() or 1) + 1)],
     f"must be an integer number of runs in [1, {os.cpu_count() or 1}], got "
     f"'{(os.cpu_count() or 1) + 1}' (at most 1 per CPU core; this host has "),
    (["largebatch", "--stop-after", "nan"], "argument --stop-after: must be a finite number"),
    (["largebatch", "--stop-after", "1e9"], "argument --stop-after: must be a finite number of "
                                            "minutes in (0, 525600]"),
    (["ablation", "--max-runs", "-1"], "argument --max-runs: must be an integer number of runs"),
    # a stray comma never widens the selection to every arm
    (["ablation", "--arms", ","], "--arms: an empty arm name in ','"),
    (["largebatch", "--arms", "baseline,,lars-8k"], "--arms: an empty arm name in"),
    (["ablation", "--arms", ""], "--arms: an empty arm name in ''"),
    # the same arm twice would be two rows of one arm in the table
    (["largebatch", "--arms", "baseline,lars-8k,baseline"],
     "--arms: baseline named more than once in 'baseline,lars-8k,baseline'"),
    (["ablation", "--arms", "no-warmup, no-warmup"], "--arms: no-warmup named more than once"),
    # a folder no directory can be made in (procfs: the permission bits pass for root)
    (["ablation", "--cache", "/proc/yasgd-none"], "bench --cache /proc/yasgd-none must be a "
                                                  "writable directory"),
])
def test_study_bench_argument_errors_are_one_line(tmp_path, args, message):
    """Bad options of the training benches: one line, exit 2, nothing trained or written."""
    out = tmp_path / "out"
    rc, stdout, err = _run(YASGD, "bench", *args, "--out", str(out))
    assert rc == 2 and err.startswith("yasgd: error: ") and err.count("\n") == 1, err
    assert message in err, err
    assert not out.exists() or not any(out.iterdir())


def test_bench_out_where_no_directory_can_be_made_is_one_line():
    rc, stdout, err = _run(YASGD, "bench", "ablation", "--out", "/proc/yasgd-none",
                           "--max-runs", "0")
    assert rc == 2 and err.count("\n") == 1, err
    assert err.startswith("yasgd: error: bench --out /proc/yasgd-none must be a writable "
                          "directory"), err
    assert not os.path.exists("/proc/yasgd-none")


def test_study_bench_reports_from_an_empty_cache_into_a_new_directory(tmp_path):
    """``--max-runs 0``: the report of what the cache holds (nothing yet), no run trained,
    the results directory made."""
    out, cache = tmp_path / "new" / "out", tmp_path / "cache"
    rc, stdout, err = _run(YASGD, "bench", "ablation", "--out", str(out), "--cache", str(cache),
                           "--max-runs", "0")
    assert rc == 0, err
    assert "Traceback" not in err and " started] " not in stdout
    assert not cache.exists() or not list(cache.glob("*.json"))
    d = json.load(open(out / "bench_ablation.json"))
    assert d["partial"] is True and d["records"] == []
    assert all(not a["complete"] and a["seeds"] == [] for a in d["setup"]["arms"])
    n = len(d["setup"]["arms"])
    assert n == len(study_plan.ablation_arms(study_plan.FULL))
    assert f"PARTIAL: 0 of {n} arms complete" in (out / "bench_ablation.md").read_text()


@pytest.mark.parametrize("module,args,message", [
    ("ablation", ["--arms", ","], "yasgd: error: --arms: an empty arm name in ','"),
    ("largebatch", ["--jobs", "0"], "yasgd: error: bench: argument --jobs: must be an integer"),
    ("optimizer", ["--out", "/proc/yasgd-none"], "yasgd: error: bench --out /proc/yasgd-none "
                                                 "must be a writable directory"),
])
def test_bench_module_entries_check_like_the_cli(module, args, message):
    """``python -m yasgd.bench.NAME`` is ``yasgd bench NAME``: the same one-line errors."""
    rc, stdout, err = _run(sys.executable, "-m", f"yasgd.bench.{module}", *args)
    assert rc == 2 and err.count("\n") == 1 and err.startswith(message), err
    assert "Traceback" not in stdout + err


def test_version_names_yasgd_and_its_stack():
    from importlib import metadata
    import yasgd
    rc, out, err = _run(YASGD, "--version")
    assert rc == 0 and err == ""
    assert out == (f"yasgd {yasgd.__version__} (mxnet {metadata.version('mxnet')}, horovod "
                   f"{metadata.version('horovod')}, numpy {metadata.version('numpy')})\n")


@pytest.mark.parametrize("command", ["train", "check-config"])
def test_missing_config_names_only_the_config(command):
    # the overrides are optional: argparse would list them among the missing arguments
    rc, out, err = _run(YASGD, command)
    assert rc == 2 and out == ""
    assert err == (f"yasgd: error: {command}: the following arguments are required: config "
                   f"(see yasgd {command} --help)\n")


CONFIG = os.path.join(ROOT, "examples", "configs", "demo.yaml")


@pytest.mark.parametrize("args,argument", [
    (["train", ""], "train: argument config"),
    (["check-config", ""], "check-config: argument config"),
    (["data", "im2rec", "", "out"], "data im2rec: argument src"),
    (["data", "im2rec", "src", ""], "data im2rec: argument dst"),
    (["data", "verify", ""], "data verify: argument prefix"),
    (["jobs", "render", "--scheduler", "pbs", "--nodes", "1", "--config", ""],
     "jobs render: argument --config"),
    (["jobs", "render", "--scheduler", "pbs", "--nodes", "1", "--config", CONFIG, "-o", ""],
     "jobs render: argument --output/-o"),
    (["simulate", "--json", ""], "simulate: argument --json"),
    (["simulate", "--plot", ""], "simulate: argument --plot"),
    (["bench", "optimizer", "--out", ""], "bench: argument --out"),
    (["bench", "ablation", "--max-runs", "0", "--out", "out", "--cache", ""],
     "bench: argument --cache"),
    (["provenance", ""], "provenance: argument run_dir"),
    (["provenance", "out", "--hostfile", ""], "provenance: argument --hostfile"),
])
def test_an_empty_path_is_one_line_and_writes_nothing(tmp_path, args, argument):
    """An empty path is refused where it is parsed: read as the current folder it would put
    a cache or a results folder's files where the command was run."""
    p = subprocess.run([YASGD, *args], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert p.returncode == 2 and p.stdout == "", (p.returncode, p.stdout)
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.startswith(f"yasgd: error: {argument}: must be a path, got ''"), p.stderr
    assert list(tmp_path.iterdir()) == []


def test_check_config_checks_the_data_when_asked(tmp_path):
    """--data: the dataset the config names must be on this host (train's own check, which
    yasgd launch runs once before any rank); without it the config alone is checked."""
    tiny = os.path.join(ROOT, "examples", "configs", "tiny.yaml")
    args = ["check-config", tiny, f"data.root={tmp_path}/nodata"]
    rc, out, err = _run(YASGD, *args)
    assert rc == 0 and err == "", err
    rc, out, err = _run(YASGD, *args, "--data")
    assert rc == 2 and out == "", out
    assert err == (f"yasgd: error: dataset directory not found: {tmp_path}/nodata (apt-get "
                   f"install dataset-fashion-mnist, or set data.root)\n"), err


def test_check_config_checks_the_run_dir_when_asked(tmp_path):
    """--run-dir: run.dir must be, or become, a writable folder on this host (train's own
    check, which yasgd launch runs once before any rank); the check leaves nothing behind."""
    tiny = os.path.join(ROOT, "examples", "configs", "tiny.yaml")
    (tmp_path / "plain").write_text("a file\n")
    args = ["check-config", tiny, f"run.dir={tmp_path}/plain/runs"]
    rc, out, err = _run(YASGD, *args)
    assert rc == 0 and err == "", err
    rc, out, err = _run(YASGD, *args, "--run-dir")
    assert rc == 2 and out == "" and err.count("\n") == 1, (out, err)
    assert err.startswith(f"yasgd: error: run directory {tmp_path}/plain/runs is not "
                          "writable: "), err
    assert err.endswith(" (config key run.dir)\n"), err
    rc, out, err = _run(YASGD, "check-config", tiny, f"run.dir={tmp_path}/new/runs",
                        "--run-dir")
    assert rc == 0 and err == "", err
    assert sorted(os.listdir(tmp_path)) == ["plain"]   # checked, not made


@pytest.mark.parametrize("command", ["train", "check-config"])
def test_a_line_break_in_a_path_stays_one_line_and_shows_as_typed(tmp_path, command):
    rc, out, err = _run(YASGD, command, f"{tmp_path}/no\nsuch.yaml")
    assert rc == 2 and out == "", out
    assert err == f"yasgd: error: config file not found: {tmp_path}/no\\nsuch.yaml\n", err


@pytest.mark.parametrize("brk", ["\n", "\r", "\x85", "\u2028", "\u2029"])
def test_a_line_break_in_an_override_is_refused_not_folded(tmp_path, brk):
    """YAML reads a line break in a plain value as a space: the loader alone would run in
    another folder than the one typed. Every command that takes overrides refuses it, in one
    line that shows it escaped, and writes nothing."""
    from yasgd import config
    assert config.load(None, ["run.dir=a\nb"]).run.dir == "a b"     # the loader's reading
    override = f"run.dir={tmp_path}/a{brk}b"
    shown = f"{tmp_path}/a{brk}b".encode("unicode_escape").decode()
    tiny = os.path.join(ROOT, "examples", "configs", "tiny.yaml")
    for command in (["check-config", tiny], ["train", tiny],
                    ["jobs", "render", "--scheduler", "pbs", "--nodes", "1", "--config", tiny]):
        rc, out, err = _run(YASGD, *command, override)
        assert (rc, out) == (2, ""), (command, err)
        assert err == (f"yasgd: error: override 'run.dir={shown}' holds a line break or NUL: a "
                       f"value is one line (YAML would read a line break in it as a space)\n"), err
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("value,message", [
    ("exp #2", "YAML reads '#2' as a comment and leaves it out of the value; drop it, or quote"),
    ("#x", "YAML reads '#x' as a comment"),
    ("0.5  # the lr", "YAML reads '# the lr' as a comment"),
    ("[1, 2] #x", "YAML reads '#x' as a comment"),
    ("|", "YAML reads | as the start of a block of later lines, and an override is one line"),
    (">-", "YAML reads > as the start of a block of later lines"),
])
def test_an_override_yaml_reads_only_part_of_is_refused(tmp_path, value, message):
    """What follows `` #`` is a YAML comment and ``|`` / ``>`` open a block: the loader
    alone would run with another value than the one typed, which a job script carries as
    typed. Every command that takes overrides refuses it and writes nothing."""
    from yasgd import config
    assert config.load(None, ["run.name=exp #2"]).run.name == "exp"   # the loader's reading
    tiny = os.path.join(ROOT, "examples", "configs", "tiny.yaml")
    for command in (["check-config", tiny], ["train", tiny],
                    ["jobs", "render", "--scheduler", "pbs", "--nodes", "1", "--config", tiny]):
        rc, out, err = _run(YASGD, *command, f"run.name={value}", f"run.dir={tmp_path}")
        assert (rc, out) == (2, ""), (command, err)
        assert err.startswith(f"yasgd: error: override 'run.name={value}': {message}") \
            and err.count("\n") == 1, err
    assert os.listdir(tmp_path) == []
    for typed in ("run.name=a#b", "run.name='exp #2'"):    # the value's own '#'
        rc, out, err = _run(YASGD, "check-config", tiny, typed)
        assert rc == 2 and "config key run.name must be a name" in err, err


@pytest.mark.parametrize("command", [["check-config"], ["train"],
                                     ["jobs", "render", "--scheduler", "pbs", "--nodes", "1",
                                      "-o", "job.sh", "--config"]])
def test_a_config_with_yaml_aliases_is_one_line_at_once(tmp_path, command):
    """Nine nested aliases in 400 bytes stand for a value of 9**9 items; any walk of it would
    not end (the timeout), so a config's aliases are refused before it is loaded."""
    s = "&l0 [q,q,q,q,q,q,q,q,q,q]"
    for i in range(1, 9):
        s = f"&l{i} [{s}," + ",".join([f"*l{i - 1}"] * 9) + "]"
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("train:\n  epochs: " + s + "\n")
    p = subprocess.run([YASGD, *command, str(bomb)], capture_output=True, text=True,
                       cwd=tmp_path, timeout=60)
    assert p.returncode == 2 and p.stdout == "", (p.returncode, p.stdout)
    assert p.stderr == (f"yasgd: error: config file {bomb} uses a YAML alias (*l0, line 2): a "
                        f"config holds plain values, each written out where it is used\n")
    assert sorted(x.name for x in tmp_path.iterdir()) == ["bomb.yaml"]


def _nested(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


def _blocks(depth: int) -> str:
    return "".join(" " * (i + 2) + "- \n" for i in range(depth)) + " " * (depth + 2) + "- 1\n"


@pytest.mark.parametrize("command", [["check-config"], ["train"],
                                     ["jobs", "render", "--scheduler", "pbs", "--nodes", "1",
                                      "-o", "job.sh", "--config"]])
@pytest.mark.parametrize("where,text", [
    ("file", "train:\n  epochs: " + _nested(31) + "\n"),          # 2 + 31 levels
    ("file", "train:\n  epochs: " + _nested(200_000) + "\n"),     # 400 kB: the scan's square
    ("file", "train:\n  epochs:\n" + _blocks(31)),                 # 2 + 31 levels
    ("file", "train:\n  epochs:\n" + _blocks(600)),                # past the recursion limit
    ("override", "train.epochs=" + _nested(33)),
    ("override", "train.epochs=" + _nested(5_000)),
], ids=["file-2+31", "file-200000", "file-blocks-2+31", "file-blocks-600", "override-33",
        "override-5000"])
def test_a_value_nested_past_any_config_is_one_line_at_once(tmp_path, command, where, text):
    """PyYAML's scanner takes time with the square of the nesting of ``[``, and its composer
    recurses a level at a time: past what a config holds, such a text is refused in one
    line, at once (the timeout: 200,000 levels would scan for hours), without a traceback."""
    tiny = tmp_path / "tiny.yaml"
    tiny.write_text(text if where == "file" else "run: {name: x}\n")
    args = [str(tiny)] + ([text] if where == "override" else [])
    p = subprocess.run([YASGD, *command, *args], capture_output=True, text=True,
                       cwd=tmp_path, timeout=60)
    assert p.returncode == 2 and p.stdout == "", (p.returncode, p.stdout)
    shown = (f"config file {tiny} is not valid YAML" if where == "file" else
             f"override {repr(text)[:24]}... ({len(repr(text)):,} characters)")
    assert p.stderr == (f"yasgd: error: {shown}: nested more than 32 levels deep (a config "
                        f"value is a number, a word or a short list)\n"), p.stderr[:300]
    assert sorted(x.name for x in tmp_path.iterdir()) == ["tiny.yaml"]


def test_a_value_nested_as_deep_as_a_config_may_reaches_the_loader(tmp_path):
    """32 levels pass the depth bound (an override's value alone; in a file, a section, its
    keys and 30 levels of a value): the loader's own line names the key's type. The first
    sequence under a key at the key's own column opens no level of YAML's."""
    rc, out, err = _run(YASGD, "check-config", CONFIG, "train.epochs=" + _nested(32))
    assert (rc, out) == (2, "")
    assert err.startswith("yasgd: error: config key train.epochs must be an integer"), err
    tiny = tmp_path / "tiny.yaml"
    for text in ("train:\n  epochs:\n" + _blocks(30), "train: {epochs: " + _nested(30) + "}\n"):
        tiny.write_text(text)
        rc, out, err = _run(YASGD, "check-config", str(tiny))
        assert (rc, out) == (2, "")
        assert err.startswith("yasgd: error: config key train.epochs must be an integer"), err


@pytest.mark.parametrize("args,message", [
    (["simulate", "--preset", "list", "--gpus", "8"],
     "simulate --preset list takes no other argument, got --gpus"),
    (["simulate", "--validate", "--json", "x.json"],
     "simulate --validate takes no other argument, got --json"),
    (["jobs", "render", "--scheduler", "pbs", "--nodes", "1", "--config", CONFIG, "--dry-run"],
     "jobs render: unrecognized arguments: --dry-run (see yasgd jobs render --help)"),
])
def test_an_option_the_command_would_ignore_is_refused(tmp_path, args, message):
    """An option given where it would do nothing is one line, not silently dropped."""
    p = subprocess.run([YASGD, *args], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert (p.returncode, p.stdout) == (2, ""), p.stdout
    assert p.stderr == f"yasgd: error: {message}\n", p.stderr
    assert list(tmp_path.iterdir()) == []


def test_provenance_is_written_once_per_run_directory(tmp_path):
    """A run's provenance.json (a training's holds its world size) is never replaced."""
    rc, out, err = _run(YASGD, "provenance", str(tmp_path))
    assert rc == 0 and out == f"{tmp_path}/provenance.json\n", err
    before = (tmp_path / "provenance.json").read_bytes()
    rc, out, err = _run(YASGD, "provenance", str(tmp_path))
    assert (rc, out) == (2, "")
    assert err == (f"yasgd: error: provenance: {tmp_path}/provenance.json exists; a run "
                   f"directory's provenance is written once (name a new RUN_DIR)\n"), err
    assert (tmp_path / "provenance.json").read_bytes() == before


# --- a standard output that cannot be written -----------------------------------------------
# Real descriptors: /dev/full (every write fails with ENOSPC, as on a full disk or quota), a
# pipe whose reader has gone (EPIPE, as in `yasgd ... | head`), and descriptor 1 closed before
# the start (Python then has no sys.stdout, and print() would drop every line without a word).
STDOUT_COMMANDS = {
    "help": ["--help"],
    "sub-command help": ["simulate", "--help"],
    "version": ["--version"],
    "check-config": ["check-config", "examples/configs/tiny.yaml"],
    "simulate": ["simulate", "--gpus", "8", "--batch", "256"],
    "jobs render": ["jobs", "render", "--scheduler", "pbs", "--nodes", "1", "--config",
                    "examples/configs/tiny.yaml"],
    "launch help": ["launch", "--help"],
}


def _with_stdout(args, stdout, buffered, **kw):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    p = subprocess.run([YASGD, *args], stdout=stdout, stderr=subprocess.PIPE, text=True,
                       cwd=ROOT, env=env, timeout=60, **kw)
    return p.returncode, p.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("name", STDOUT_COMMANDS)
def test_a_full_standard_output_is_one_line(name, buffered):
    with open("/dev/full", "w") as full:
        rc, err = _with_stdout(STDOUT_COMMANDS[name], full, buffered)
    assert rc == 2 and err == "yasgd: error: cannot write standard output: No space left on " \
                              "device\n", err


@pytest.mark.parametrize("name", STDOUT_COMMANDS)
def test_a_standard_output_closed_at_the_start_is_one_line(name):
    rc, err = _with_stdout(STDOUT_COMMANDS[name], None, True, preexec_fn=lambda: os.close(1))
    assert rc == 2 and err == "yasgd: error: cannot write standard output: it is closed\n", err


@pytest.mark.parametrize("name", STDOUT_COMMANDS)
def test_a_reader_that_went_away_ends_the_command_as_sigpipe_would(name):
    # as `yes | head` ends: no word, 128 + SIGPIPE (Python ignores the signal, so each
    # write fails with EPIPE instead)
    r, w = os.pipe()
    os.close(r)
    try:
        rc, err = _with_stdout(STDOUT_COMMANDS[name], w, True)
    finally:
        os.close(w)
    assert rc == 141 and err == "", err


def test_a_standard_output_that_takes_the_output_is_untouched(tmp_path):
    # the guard changes nothing where the writes succeed: bytes as written (a job script's
    # surrogate-escaped bytes included), through a file and through the buffer
    with open(tmp_path / "out", "w") as f:
        rc, err = _with_stdout(STDOUT_COMMANDS["jobs render"], f, True)
    assert rc == 0 and err == ""
    direct = subprocess.run([sys.executable, "-c", "from yasgd import jobs; import sys; "
                             "sys.stdout.write(jobs.render(scheduler='pbs', nodes=1, "
                             "gpus_per_node=None, config='examples/configs/tiny.yaml', "
                             "walltime=None, group=None, queue=None, overrides=[]))"],
                            capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert (tmp_path / "out").read_text() == direct.stdout and direct.stdout.startswith("#!")


def _tools():
    from test_usage import FROZEN, _documented_tools
    return [m for m in _documented_tools() if m not in FROZEN and m != "yasgd.cli"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("module", _tools())
def test_a_python_m_tool_guards_its_standard_output_as_yasgd_does(module):
    """Every documented ``python -m yasgd.X``: its --help into a full disk or a closed
    output is the one line and status 2, into a reader that went away 141, no traceback."""
    def run(stdout, **kw):
        p = subprocess.run([sys.executable, "-m", module, "--help"], stdout=stdout,
                           stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=60, **kw)
        return p.returncode, p.stderr
    with open("/dev/full", "w") as full:
        assert run(full) == (2, "yasgd: error: cannot write standard output: No space left "
                                "on device\n")
    assert run(None, preexec_fn=lambda: os.close(1)) == (
        2, "yasgd: error: cannot write standard output: it is closed\n")
    r, w = os.pipe()
    os.close(r)
    try:
        assert run(w) == (141, "")
    finally:
        os.close(w)
