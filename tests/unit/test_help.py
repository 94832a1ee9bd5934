"""``--help`` of every command (``yasgd ...`` and the ``python -m yasgd.X`` tools the documents
name): each argument says what it is (and its default, where it has one), each command says
what it does, and each example the help shows parses. The parsers are walked as argparse
built them, so a command or option added later is checked too."""
import argparse
import importlib
import os
import shlex
import subprocess
import sys

import pytest

from test_usage import FROZEN, _documented_tools   # same folder: pytest puts it on sys.path
from yasgd import cli_args, launch, usage

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
YASGD = os.path.join(os.path.dirname(sys.executable), "yasgd")
# a flag's default (False) goes without saying; None is "not given", which the help says
# where it means more than that (the checks below ask for no word on it)
_UNSAID = (None, False, argparse.SUPPRESS)


# the tools the documents name, but those whose plain argparse is frozen (test_usage says
# why) and yasgd.cli and yasgd.launch, walked as `yasgd ...`
_NOT_WALKED = FROZEN | {"yasgd.cli", "yasgd.launch"}


class _Built(Exception):
    pass


def _parser_of(module, monkeypatch):
    """The parser a tool's ``main`` builds, caught as it starts to parse (nothing runs)."""
    def caught(self, *args, **kwargs):
        raise _Built(self)
    with monkeypatch.context() as m:
        m.setattr(usage.Parser, "parse_args", caught)
        m.setattr(usage.Parser, "parse_known_args", caught)
        with pytest.raises(_Built) as built:
            importlib.import_module(module).main([])
    return built.value.args[0]


def _walk(name, top):
    """(command as typed, parser) for ``top`` and each of its sub-commands."""
    out, todo = [], [(name, top)]
    while todo:
        name, p = todo.pop(0)
        out.append((name, p))
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += [(f"{name} {sub}", sp) for sub, sp in action.choices.items()
                         if sp.add_help]     # `yasgd launch` here is a line of the list only
    return out


PARSERS = dict(_walk("yasgd", cli_args.parser())
               + [("yasgd launch", launch.parser("yasgd launch"))])
TOOLS = [m for m in _documented_tools() if m not in _NOT_WALKED]


def test_the_walk_finds_every_command():
    assert {"yasgd train", "yasgd check-config", "yasgd data im2rec", "yasgd data verify",
            "yasgd jobs render", "yasgd jobs submit", "yasgd simulate", "yasgd bench",
            "yasgd preflight", "yasgd provenance", "yasgd launch"} <= set(PARSERS)


def _check_says_what_it_does(name, p):
    text = " ".join((p.description or "").split())
    assert text, f"{name}: no description"
    assert text[-1] in ".)", f"{name}: the description is cut short: {text!r}"
    assert "``" not in text, f"{name}: the description shows reST markup: {text!r}"


def _check_arguments(name, p):
    bare, no_default = [], []
    for a in p._actions:
        if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)) or \
                a.help == argparse.SUPPRESS:        # hidden: the tool's own worker options
            continue
        label = "/".join(a.option_strings) or a.dest
        if not a.help:
            bare.append(label)
        elif a.option_strings and a.default not in _UNSAID and "default" not in a.help:
            no_default.append(f"{label} (default {a.default!r})")
    assert not bare, f"{name}: no help for {bare}"
    assert not no_default, f"{name}: help does not give the default of {no_default}"


@pytest.mark.parametrize("name", PARSERS)
def test_every_command_says_what_it_does(name):
    _check_says_what_it_does(name, PARSERS[name])


@pytest.mark.parametrize("name", PARSERS)
def test_every_argument_says_what_it_is_and_its_default(name):
    _check_arguments(name, PARSERS[name])


def test_the_documented_tools_are_found():
    assert {"yasgd.bench.report", "yasgd.bench.summary", "yasgd.simulate.mlperf_logs",
            "yasgd.wheelarch"} <= set(TOOLS)


@pytest.mark.parametrize("module", TOOLS)
def test_every_documented_tool_says_what_it_and_each_argument_is(module, monkeypatch):
    for name, p in _walk(f"python -m {module}", _parser_of(module, monkeypatch)):
        _check_says_what_it_does(name, p)
        _check_arguments(name, p)


def _examples():
    """Every command line under "examples:" in an epilog, continuation lines joined."""
    found = []
    for name, p in PARSERS.items():
        lines = (p.epilog or "").split("examples:\n", 1)[1:]
        joined = "\n".join(lines).replace("\\\n", " ")
        for line in joined.splitlines():
            words = shlex.split(line, comments=True) if line.startswith("  ") else []
            if words and words not in [w for _, w in found]:
                found.append((name, words))
    return found


EXAMPLES = _examples()


def _parse(words):
    """Parse a ``yasgd ...`` command line as the command would, the launcher's COMMAND too."""
    words = words[words.index("yasgd") + 1:]     # "mpirun -np 8 yasgd ..." -> its arguments
    if words[:1] == ["launch"]:
        args = launch.parser("yasgd launch").parse_args(words[1:])
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        assert command, words
        return _parse(command) if command[0] == "yasgd" else args
    return cli_args.parser().parse_args(words)


def test_the_helps_show_examples():
    shown = {name for name, _ in EXAMPLES}
    assert {"yasgd", "yasgd train", "yasgd jobs render", "yasgd simulate", "yasgd bench",
            "yasgd launch"} <= shown


@pytest.mark.parametrize("name,words", EXAMPLES, ids=[" ".join(w) for _, w in EXAMPLES])
def test_every_example_in_a_help_parses(name, words):
    assert "yasgd" in words, (name, words)
    try:
        _parse(words)
    except SystemExit as e:                 # the parser's one line is on stderr already
        pytest.fail(f"{name}: example {shlex.join(words)!r} does not parse (exit {e.code})")
    for word in words:                      # the files an example names are in the repo
        if word.startswith("examples/"):
            assert os.path.exists(os.path.join(ROOT, word)), word


@pytest.mark.parametrize("args", [[], ["train"], ["jobs", "render"], ["bench"],
                                  ["launch"]], ids=lambda a: " ".join(a) or "yasgd")
def test_the_installed_command_prints_the_help(args):
    p = subprocess.run([YASGD, *args, "--help"], capture_output=True, text=True, cwd=ROOT,
                       timeout=60, env={**os.environ, "COLUMNS": "100"})
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert p.stdout.startswith(f"usage: {' '.join(['yasgd', *args])}")
    assert max(map(len, p.stdout.splitlines())) <= 100


def _read_only(words):
    """An example that reads and prints only (nothing written, trained or submitted)."""
    return words[:1] == ["yasgd"] and (words[1:2] in (["check-config"], ["simulate"]) or
                                       words[1:3] == ["jobs", "submit"] and "--dry-run" in words)


READ_ONLY = [(n, w) for n, w in EXAMPLES if _read_only(w)]


@pytest.mark.parametrize("name,words", READ_ONLY, ids=[" ".join(w) for _, w in READ_ONLY])
def test_every_read_only_example_runs(name, words):
    p = subprocess.run([YASGD, *words[1:]], capture_output=True, text=True, cwd=ROOT,
                       timeout=120)
    assert p.returncode == 0 and p.stderr == "", (name, p.stderr)
    assert p.stdout.strip()


def _trains(words):
    """(config and overrides, world size) of an example that trains, else None: the ranks
    are the -np of the mpirun or yasgd launch it runs under (1 where none)."""
    at = [i for i, w in enumerate(words) if w == "yasgd"][-1]
    if words[at + 1:at + 2] != ["train"]:
        return None
    np = [int(words[i + 1]) for i in range(at) if words[i] == "-np"]
    return words[at + 2:], (np[-1] if np else 1)


TRAINS = [(n, w) for n, w in EXAMPLES if _trains(w)]


@pytest.mark.parametrize("name,words", TRAINS, ids=[" ".join(w) for _, w in TRAINS])
def test_every_training_example_passes_the_checks_for_its_ranks(name, words):
    # what train checks before it starts, at the example's world size (nothing is trained)
    args, ranks = _trains(words)
    p = subprocess.run([YASGD, "check-config", *args, "--world-size", str(ranks)],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0 and p.stderr == "", (name, p.stderr)

