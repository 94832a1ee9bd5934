"""A Ctrl-C while an entry module imports (``yasgd`` = ``yasgd.cli``, and ``python -m
yasgd.launch``, which ``make train`` runs): one line, ``yasgd: interrupted``, exit status 130,
never a KeyboardInterrupt traceback through the imports (yasgd.importing). Each case is a
fresh interpreter whose import system sends it a real SIGINT as one named module is first
looked up, so the signal lands inside that import, wherever the host's timing would put it.
"""
import os
import signal
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# the entry as its command runs it: the console script's two lines, and runpy for -m
ENTRIES = {
    "yasgd": ("sys.argv = ['yasgd', 'check-config', 'examples/configs/tiny.yaml']\n"
              "from yasgd.cli import main\nsys.exit(main())"),
    "python -m yasgd.launch": ("sys.argv = ['python -m yasgd.launch', '-np', '1', '--', 'true']\n"
                               "import runpy\n"
                               "runpy.run_module('yasgd.launch', run_name='__main__', "
                               "alter_sys=True)"),
}
# the module each entry imports first, where its guard is
_MODULE = {"yasgd": "yasgd.cli", "python -m yasgd.launch": "yasgd.launch"}


def _sigint_as_python_starts_it():
    """SIGINT's default action in the child, as in a terminal, also where the tests run
    with it ignored (a background job); Python then installs its own handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _python(code, *args):
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=60, preexec_fn=_sigint_as_python_starts_it,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))


def _guarded_imports(entry):
    """The modules the entry loads once its guard is in (after yasgd.importing), in order."""
    code = textwrap.dedent(f"""
        import sys
        seen = []
        class Log:
            def find_spec(self, name, path=None, target=None):
                seen.append(name)
        sys.meta_path.insert(0, Log())
        import {_MODULE[entry]}
        print(" ".join(seen[seen.index("yasgd.importing") + 1:] if "yasgd.importing" in seen
                       else ["NO-GUARD"]))
    """)
    p = _python(code)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() != ["NO-GUARD"], f"{_MODULE[entry]} imports without the guard"
    return p.stdout.split()


def _sigint_inside(entry, module):
    code = textwrap.dedent(f"""
        import os, signal, sys
        class Stop:
            def find_spec(self, name, path=None, target=None):
                if name == {module!r}:
                    os.kill(os.getpid(), signal.SIGINT)
        sys.meta_path.insert(0, Stop())
    """) + ENTRIES[entry]
    return _python(code)


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_ctrl_c_inside_any_import_of_an_entry_is_one_line(entry):
    modules = [m for m in _guarded_imports(entry) if m.startswith("yasgd.")]
    assert len(modules) >= 2, modules       # the entry's own modules are among them
    for module in modules:
        p = _sigint_inside(entry, module)
        assert (p.returncode, p.stderr, p.stdout) == (130, "yasgd: interrupted\n", ""), \
            (module, p.returncode, p.stderr[-400:])


@pytest.mark.parametrize("entry", ENTRIES)
def test_after_the_imports_the_signals_are_as_before(entry):
    # Python's own SIGINT handler again (main() reports a Ctrl-C from there); SIGTERM never
    # taken (a rank still starting ends without a word); an ignored SIGINT left ignored
    code = textwrap.dedent(f"""
        import signal, sys
        if sys.argv[1] == "ignored":
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        import {_MODULE[entry]}
        print(signal.getsignal(signal.SIGINT) is (signal.SIG_IGN if sys.argv[1] == "ignored"
                                                  else signal.default_int_handler),
              signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)
    """)
    for how in ("default", "ignored"):
        p = _python(code, how)
        assert p.stdout.split() == ["True", "True"], (how, p.stdout, p.stderr)
