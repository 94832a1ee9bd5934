"""The one form of a usage error in every command yasgd installs or documents (``yasgd ...``,
``python -m yasgd.launch``, the maintainers' ``python -m yasgd.bench.report`` and the like):
one line on stderr, ``yasgd: error: NAME: MESSAGE``, and exit status 2, where NAME is the
command as typed after ``yasgd`` or after ``python -m yasgd.`` (``bench``, ``jobs submit``,
``launch``, ``bench.report``). :class:`Parser` gives argparse's own errors that form (its
usage block and ``PROG: error:`` line would otherwise be two lines in another form);
:func:`error` is the same line for what a command finds wrong after parsing (a missing file,
two options that exclude each other). A standard output that cannot be written ends a
command the same way (:func:`stdout_checked`, :func:`stdout_failed`), not in a traceback.

The training modules keep plain argparse where they have it (``python -m yasgd.ops.build``,
the bench's study worker): a cached run records the source of every module it imports, and
an edit there would make every recorded run another code version.
"""
from __future__ import annotations

import argparse
import contextlib
import errno
import os
import re
import signal
import sys
from typing import Callable, Iterator, Optional, Tuple

_HEADS = ("python -m yasgd.", "yasgd")


def command_name(prog: str) -> str:
    """NAME in the error line of the command whose argparse ``prog`` is ``prog``: ``yasgd
    bench`` -> ``bench``, ``python -m yasgd.bench.report`` -> ``bench.report``, ``yasgd`` ->
    ``""`` (the top level names no command)."""
    for head in _HEADS:
        if prog.startswith(head):
            return prog[len(head):].strip()
    return prog


#: what :func:`error` writes for a control character or line break in a message (a path or
#: value as the user typed it): Python's escape for it, so the line stays one line and still
#: says exactly what was given ("a\\nb", never "a b")
_ESCAPES = ({c: f"\\x{c:02x}" for c in (*range(0x20), 0x7f, 0x85)}
            | {0x2028: "\\u2028", 0x2029: "\\u2029"}
            | {ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"})


def one_line(message: object) -> str:
    """``message`` with each control character or line break escaped: the text of one line
    (an error's or a warning's) that a path or value typed with a newline cannot split."""
    return str(message).translate(_ESCAPES)


def error(name: str, message: object) -> int:
    """Write the usage-error line of command ``name`` (a control character or line break in
    the message escaped, so that it stays one line); returns the exit status, 2."""
    text = one_line(message)
    sys.stderr.write(f"yasgd: error: {name + ': ' if name else ''}{text}\n")
    sys.stderr.flush()
    return 2


#: a number as C's readers (and the job schedulers) take it: ASCII digits, a sign, a decimal
#: point, an exponent; not Python's wider int() and float() (yasgd.envcheck reads so too)
NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


class Parser(argparse.ArgumentParser):
    """argparse whose errors are :func:`error`'s one line, naming the command and where its
    help is (``(see PROG --help)``); ``--help`` is unchanged. Sub-commands made with
    ``add_subparsers`` are parsers of the same class. ``hidden``: fragments argparse puts in
    a message that the line leaves out (``yasgd train`` names its optional overrides among
    the arguments it misses). ``name``: NAME where ``prog`` is no ``yasgd`` command (``make
    cluster-rehearsal``'s script)."""

    hidden: Tuple[str, ...] = ()

    def __init__(self, *args, name: Optional[str] = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.name = command_name(self.prog) if name is None else name

    def error(self, message: str):
        for fragment in self.hidden:
            message = message.replace(fragment, "")
        self.exit(error(self.name, f"{message} (see {self.prog} --help)"))

    def _get_value(self, action, arg_string):
        # a number is typed as NUMBER: not as Python's int() and float() also take it
        # ("1_0" as 10, "\u0661" as 1)
        value = super()._get_value(action, arg_string)
        if isinstance(value, (int, float)) and not isinstance(value, bool) \
                and not NUMBER.fullmatch(arg_string):
            raise argparse.ArgumentError(action, f"must be a number written in ASCII digits, got "
                                                 f"{arg_string!r}")
        return value

    def _print_message(self, message, file=None):
        # argparse drops a write that fails, so --help into a full disk would exit 0 having
        # printed nothing; here it raises, for the command's guard of its standard output
        # (stdout_checked)
        if message:
            (file or sys.stderr).write(message)

    def parse_args(self, args=None, namespace=None):
        # argparse reports an unknown option of a sub-command from the top parser ("yasgd:
        # error: unrecognized arguments", its help the top one's); the line names the
        # sub-command that was chosen instead, and points to its help
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            chosen = self._chosen(ns)
            tail = chosen._trailing_list()
            if tail is not None and not any(e.startswith("-") for e in extras):
                # argparse fills a positional list in one go: the items given after an
                # option (`check-config C --world-size 8 train.epochs=5`) come back unparsed;
                # they belong to the list, in the order typed, as they would before it
                setattr(ns, tail, [*(getattr(ns, tail) or []), *extras])
            else:
                chosen.error("unrecognized arguments: " + " ".join(extras))
        return ns

    def _trailing_list(self) -> Optional[str]:
        """The destination of this parser's last positional where that takes a list of any
        length (``nargs="*"`` or ``"+"``: a config's overrides, the files of a tool), else
        None."""
        positionals = [a for a in self._actions if not a.option_strings]
        last = positionals[-1] if positionals else None
        return last.dest if last is not None and last.nargs in ("*", "+") else None

    def _chosen(self, ns: argparse.Namespace) -> argparse.ArgumentParser:
        """The deepest sub-command parser ``ns`` chose (this parser where none)."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                sub = action.choices.get(getattr(ns, action.dest, None) or "")
                if sub is not None:
                    return sub._chosen(ns) if isinstance(sub, Parser) else sub
        return self

    def fail(self, message: object) -> int:
        """The command's error line for what it finds wrong after parsing (no help hint:
        the arguments parsed); returns the exit status, 2."""
        return error(self.name, message)


class StdoutError(OSError):
    """A write to standard output failed: its reader went away (EPIPE), its disk is full,
    or the descriptor was closed before the command started."""


class _Guarded:
    """A stream whose failed writes and flushes raise :class:`StdoutError` (its ``buffer``
    too: a job script is written there as bytes); anything else is the stream's own."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, data):
        return self._guarded(self._stream.write, data)

    def writelines(self, lines):
        return self._guarded(self._stream.writelines, lines)

    def flush(self):
        return self._guarded(self._stream.flush)

    @property
    def buffer(self):
        return _Guarded(self._stream.buffer)

    def __getattr__(self, name):
        return getattr(self._stream, name)

    @staticmethod
    def _guarded(call, *args):
        try:
            return call(*args)
        except OSError as e:
            raise StdoutError(e.errno, e.strerror) from e


@contextlib.contextmanager
def stdout_checked() -> Iterator[None]:
    """``sys.stdout`` guarded in the block, and flushed at its end, so that a write that
    fails is :class:`StdoutError` here rather than in the interpreter's last flush; a
    standard output closed before the start (Python then has none) is one at once."""
    if sys.stdout is None:
        raise StdoutError(errno.EBADF, "it is closed")
    real = sys.stdout
    sys.stdout = _Guarded(real)
    try:
        yield
        sys.stdout.flush()
    finally:
        if isinstance(sys.stdout, _Guarded):
            sys.stdout = real


def stdout_failed(e: StdoutError) -> int:
    """A command's end after ``e``: its standard output is pointed at /dev/null (what is
    still buffered would fail again at exit), and its exit status returned. A reader that
    went away (``yasgd ... | head``) ends it without a word, as SIGPIPE ends other commands
    (141); anything else is one line and status 2."""
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)
    if e.errno == errno.EPIPE:
        return 128 + signal.SIGPIPE
    return error("", f"cannot write standard output: {e.strerror or e}")


def run(main: Callable[[], Optional[int]]) -> int:
    """The exit status of a ``python -m yasgd.X`` tool's ``main()``, its standard output
    guarded as the ``yasgd`` command's is (:func:`stdout_checked`): a full disk or a closed
    output is one line and status 2, a reader that went away status 141, ``--help``
    included, never a traceback."""
    try:
        with stdout_checked():
            try:
                return main() or 0
            except SystemExit as e:     # argparse: --help (0), a usage error (2)
                if not (e.code is None or isinstance(e.code, int)):
                    raise
                sys.stdout.flush()      # in the guard: what --help wrote must reach its file
                return e.code or 0
    except StdoutError as e:
        return stdout_failed(e)
