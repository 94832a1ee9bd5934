"""One form for every usage error (yasgd.usage): the ``yasgd`` commands and every ``python -m
yasgd.*`` tool the documents name answer a bad argument with one ``yasgd: error: NAME:`` line
and exit status 2, through one parser class."""
import glob
import os
import re
import subprocess
import sys

import pytest

from yasgd import usage

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# modules every cached training run imports: an edit makes every recorded run another code
# version (their plain argparse keeps its usage block and "PROG: error:" line)
FROZEN = {"yasgd.ops.build", "yasgd.bench.study_worker"}


def test_command_name_and_the_line(capsys):
    assert [usage.command_name(p) for p in (
        "yasgd", "yasgd bench", "yasgd jobs submit", "python -m yasgd.launch",
        "python -m yasgd.bench.report", "other")] == [
        "", "bench", "jobs submit", "launch", "bench.report", "other"]
    ap = usage.Parser(prog="python -m yasgd.bench.summary")
    ap.add_argument("--n", type=int)
    with pytest.raises(SystemExit) as e:
        ap.parse_args(["--n", "x"])
    assert e.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and err == ("yasgd: error: bench.summary: argument --n: invalid int value: "
                                 "'x' (see python -m yasgd.bench.summary --help)\n")
    # after parsing: the same line without the help hint; a line break or control
    # character in it (a path as typed) escaped, so the line is one line and exact
    assert ap.fail("--out: a\nb\tc\x1b[0m\u2028d is not a folder") == 2
    assert capsys.readouterr().err == (
        "yasgd: error: bench.summary: --out: a\\nb\\tc\\x1b[0m\\u2028d is not a folder\n")
    assert usage.error("", "top level") == 2
    assert capsys.readouterr().err == "yasgd: error: top level\n"


def test_sub_commands_and_hidden_fragments(capsys):
    class P(usage.Parser):
        hidden = (", extra",)
    ap = P(prog="yasgd")
    sub = ap.add_subparsers(dest="cmd", required=True).add_parser("train")
    sub.add_argument("config")
    sub.add_argument("extra", nargs="*")
    assert type(sub) is P
    with pytest.raises(SystemExit):
        ap.parse_args(["train"])
    assert capsys.readouterr().err == ("yasgd: error: train: the following arguments are "
                                       "required: config (see yasgd train --help)\n")


def test_an_unknown_option_is_named_by_the_sub_command_chosen(capsys):
    ap = usage.Parser(prog="yasgd")
    subs = ap.add_subparsers(dest="cmd", required=True)
    jobs = subs.add_parser("jobs").add_subparsers(dest="jobs_cmd", required=True)
    jobs.add_parser("submit").add_argument("--nodes", type=int)
    subs.add_parser("bench").add_argument("name")
    for argv, name in ((["jobs", "submit", "--bogus"], "jobs submit"),
                       (["bench", "x", "--bogus", "y"], "bench")):
        with pytest.raises(SystemExit):
            ap.parse_args(argv)
        extra = " ".join(argv[argv.index("--bogus"):])
        assert capsys.readouterr().err == (f"yasgd: error: {name}: unrecognized arguments: "
                                           f"{extra} (see yasgd {name} --help)\n")
    assert ap.parse_args(["jobs", "submit", "--nodes", "2"]).nodes == 2


def test_a_list_positional_takes_its_items_after_an_option_too(capsys):
    # argparse fills `overrides` when it first meets a positional: items typed after an
    # option would be "unrecognized"; they join the list in the order typed
    ap = usage.Parser(prog="yasgd")
    c = ap.add_subparsers(dest="cmd", required=True).add_parser("check-config")
    c.add_argument("config")
    c.add_argument("overrides", nargs="*")
    c.add_argument("--world-size", type=int, default=1)
    for argv, overrides in (
            (["C", "a=1", "--world-size", "8", "b=2", "a=3"], ["a=1", "b=2", "a=3"]),
            (["C", "--world-size", "8", "a=1", "b=2"], ["a=1", "b=2"]),
            (["--world-size", "8", "C", "a=1"], ["a=1"])):
        ns = ap.parse_args(["check-config", *argv])
        assert (ns.config, ns.overrides, ns.world_size) == ("C", overrides, 8)
    # an option it does not know still ends the parse, with every item left over named
    with pytest.raises(SystemExit):
        ap.parse_args(["check-config", "C", "--world-size", "8", "a=1", "--frob"])
    assert capsys.readouterr().err == ("yasgd: error: check-config: unrecognized arguments: "
                                       "a=1 --frob (see yasgd check-config --help)\n")
    # a parser whose last positional is no list keeps argparse's answer
    p = usage.Parser(prog="yasgd provenance")
    p.add_argument("run_dir")
    p.add_argument("--hostfile")
    with pytest.raises(SystemExit):
        p.parse_args(["d", "--hostfile", "h", "extra"])
    assert "unrecognized arguments: extra" in capsys.readouterr().err


def _documented_tools():
    """Every ``python -m yasgd.X`` the README, docs/, jobs/ and the Makefile name."""
    found = set()
    paths = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "Makefile")] \
        + glob.glob(os.path.join(ROOT, "docs", "*.md")) \
        + glob.glob(os.path.join(ROOT, "jobs", "**", "*"), recursive=True)
    for path in filter(os.path.isfile, paths):
        with open(path, errors="replace") as f:
            found |= set(re.findall(r"python -m (yasgd(?:\.[a-z_]+)+)", f.read()))
    return sorted(found)


def test_every_parser_outside_the_frozen_modules_is_the_one_class():
    plain = set()
    for path in glob.glob(os.path.join(ROOT, "yasgd", "**", "*.py"), recursive=True):
        mod = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".").removesuffix(".__init__")
        with open(path) as f:
            text = f.read()
        if mod != "yasgd.usage" and re.search(
                r"argparse\.ArgumentParser\(|\(argparse\.ArgumentParser\)", text):
            plain.add(mod)
    assert plain == FROZEN
    tools = _documented_tools()
    assert {"yasgd.bench.report", "yasgd.launch", "yasgd.simulate.mlperf_logs"} <= set(tools)


@pytest.mark.parametrize("module", [m for m in _documented_tools() if m not in FROZEN])
def test_each_documented_tool_answers_a_bad_argument_with_one_line(module):
    p = subprocess.run([sys.executable, "-m", module, "--no-such-option"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    name = usage.command_name("python -m " + module) if module != "yasgd.cli" else ""
    assert p.returncode == 2 and p.stdout == "", (p.stdout, p.stderr)
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.startswith("yasgd: error: " + (name + ": " if name else "")), p.stderr
    # argparse names a missing required argument before an unknown one
    assert "--no-such-option" in p.stderr or "arguments are required" in p.stderr


@pytest.mark.parametrize("args,what", [
    (["--scheduler", "lsf"], "argument --scheduler: invalid choice: 'lsf'"),
    (["--scheduler", "pbs", "--script", "no/such/job.sh"], "--script no/such/job.sh is not a file"),
    (["--scheduler", "pbs", "--timeout", "-1"], "--timeout must be a finite number"),
    (["--scheduler", "pbs", "--timeout", "nan"], "argument --timeout: must be a number written "
                                                 "in ASCII digits, got 'nan'"),
    (["--scheduler", "pbs", "--script", ""], "--script '' is not a file"),
    (["--scheduler", "pbs", "--runs", "README.md"], "--runs README.md: "
                                                    f"{os.path.join(ROOT, 'README.md')} is not a "
                                                    "directory"),
    (["--scheduler", "pbs", "train.epochs=abc"], "config key train.epochs must be an integer"),
    (["--scheduler", "pbs", "--script", "README.md", "epochs"], "override 'epochs' is not of "
                                                               "the form section.key=value")])
def test_the_cluster_rehearsal_answers_in_the_same_form(args, what):
    """``make cluster-rehearsal``'s script (tests/cluster/rehearsal.py): refused before any
    namespace, daemon or folder is made."""
    runs = [] if "--runs" in args else ["--runs", "no/such/runs"]
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "cluster", "rehearsal.py"),
                        *args, *runs], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stdout == "", (p.stdout, p.stderr)
    assert p.stderr.startswith("yasgd: error: cluster-rehearsal: ") and what in p.stderr
    assert p.stderr.count("\n") == 1 and not os.path.exists(os.path.join(ROOT, "no"))


# a number typed for an option: ASCII digits (with a sign, a point, an exponent), as C and
# the schedulers read one; Python's int() and float() also take "1_0" and other scripts'
# digits ("\u0661" is 1), which started a bench's training
@pytest.mark.parametrize("argv", [
    ["bench", "largebatch", "--jobs", "{}"], ["bench", "ablation", "--max-runs", "{}"],
    ["bench", "largebatch", "--stop-after", "{}"], ["preflight", "--timeout", "{}"],
    ["simulate", "--gpus", "{}"], ["data", "im2rec", "a", "b", "--workers", "{}"]])
@pytest.mark.parametrize("typed", ["0_1", "\u0661", " 1", "1 ", "\uff11", "\u00b9"])
def test_a_number_in_other_than_ascii_digits_is_refused(argv, typed, capsys):
    # each but the last is 1 to int() and float(); "\u00b9" (a superscript) to neither
    from yasgd import cli
    with pytest.raises(SystemExit) as e:
        cli.parse([a.format(typed) for a in argv])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1, err
    ascii_rule = f"must be a number written in ASCII digits, got {typed!r}"
    assert repr(typed) in err and (typed == "\u00b9" or ascii_rule in err), err


@pytest.mark.parametrize("typed,value", [("+2", 2), ("2", 2), ("1e1", 10.0), ("0.5", 0.5)])
def test_numbers_in_ascii_digits_parse(typed, value):
    from yasgd import cli, launch
    if isinstance(value, int):
        assert launch.parser().parse_args(["-np", typed, "true"]).np == value
    assert cli.parse(["preflight", "--timeout", typed]).timeout == value
