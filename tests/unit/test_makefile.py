"""The Makefile's variables as make reads them (``make -n``: the commands, none run): a
yes/no variable is on, off or refused before anything runs, and a value typed for a path
or a count reaches its command as one argument, whatever it holds."""
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAKE = shutil.which("make")
pytestmark = pytest.mark.skipif(MAKE is None, reason="no make")


def _plan(*args):
    p = subprocess.run([MAKE, "-n", "--no-print-directory", *args], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def _command(out, starts):
    """The words, as bash reads them, of the one planned command that starts with ``starts``."""
    lines = [ln for ln in out.replace("\\\n", " ").splitlines() if ln.startswith(starts)]
    assert len(lines) == 1, out
    words = subprocess.run(["bash", "-c", "printf '%s\\0' " + lines[0]], capture_output=True,
                           text=True, timeout=60, cwd=ROOT).stdout
    return words.split("\0")[:-1]


@pytest.mark.parametrize("value,on", [("1", True), ("yes", True), ("true", True),
                                      ("0", False), ("no", False), ("false", False),
                                      ("", False), (None, False)])
def test_quick_and_dry_run_are_on_or_off(value, on):
    given = [] if value is None else [f"QUICK={value}"]
    rc, out, err = _plan("bench-data", *given)
    assert rc == 0, err
    assert ("--quick" in _command(out, ".venv/bin/yasgd bench data")) == on
    given = [] if value is None else [f"DRY_RUN={value}"]
    rc, out, err = _plan("install", *given)
    assert rc == 0, err
    assert ("--dry-run" in _command(out, "MXNET=")) == on


@pytest.mark.parametrize("name,target", [("QUICK", "bench-data"), ("DRY_RUN", "install"),
                                         ("QUICK", "train")])
@pytest.mark.parametrize("value", ["maybe", "1 0", "2"])
def test_any_other_yes_no_value_stops_make_before_anything_runs(name, target, value):
    rc, out, err = _plan(target, f"{name}={value}")
    assert (rc, out) == (2, ""), out
    assert err.strip().endswith(f"*** {name}={value}: use 1 (on) or 0 (off).  Stop."), err


# ("$" is make's own: a typed "$$" is one "$")
ODD = ["my runs/out", "it's", 'a"b', "a$$b;touch x", "tab\there", "*", "~/x", "-"]


@pytest.mark.parametrize("typed", ODD)
def test_a_typed_path_is_one_argument(typed):
    value = typed.replace("$$", "$")
    rc, out, err = _plan("bench-data", f"OUT={typed}")
    assert rc == 0, err
    words = _command(out, ".venv/bin/yasgd bench data")
    assert words[words.index("--out") + 1] == value
    rc, out, err = _plan("train", f"CONFIG={typed}")
    assert rc == 0, err
    assert _command(out, ".venv/bin/python -m yasgd.launch")[-1] == value
    rc, out, err = _plan("cluster-rehearsal", f"SCRIPT={typed}")
    assert rc == 0, err
    words = _command(out, ".venv/bin/python tests/cluster/rehearsal.py")
    assert words[words.index("--script") + 1] == value


def test_the_plain_defaults_are_printed_as_they_are():
    # make train's and make test's commands read as before: nothing quoted that needs none
    _, out, _ = _plan("train")
    assert ".venv/bin/python -m yasgd.launch -np 2 .venv/bin/yasgd train " \
           "examples/configs/demo.yaml" in [ln.rstrip() for ln in out.splitlines()]
    _, out, _ = _plan("test-multiproc")
    assert out.splitlines() == [".venv/bin/python -m yasgd.launch -np 2 .venv/bin/python -m "
                                "pytest -q -p no:cacheprovider tests/multiproc"]
