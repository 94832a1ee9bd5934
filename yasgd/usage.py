"""The one form of a usage error in every command yasgd installs or documents (``yasgd ...``,
``python -m yasgd.launch``, the maintainers' ``python -m yasgd.bench.report`` and the like):
one line on stderr, ``yasgd: error: NAME: MESSAGE``, and exit status 2, where NAME is the
command as typed after ``yasgd`` or after ``python -m yasgd.`` (``bench``, ``jobs submit``,
``launch``, ``bench.report``). :class:`Parser` gives argparse's own errors that form (its
usage block and ``PROG: error:`` line would otherwise be two lines in another form);
:func:`error` is the same line for what a command finds wrong after parsing (a missing file,
two options that exclude each other).

The training modules keep plain argparse where they have it (``python -m yasgd.ops.build``,
the bench's study worker): a cached run records the source of every module it imports, and
an edit there would make every recorded run another code version.
"""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Tuple

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


def error(name: str, message: object) -> int:
    """Write the usage-error line of command ``name`` (a control character or line break in
    the message escaped, so that it stays one line); returns the exit status, 2."""
    text = str(message).translate(_ESCAPES)
    sys.stderr.write(f"yasgd: error: {name + ': ' if name else ''}{text}\n")
    sys.stderr.flush()
    return 2


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

    def _print_message(self, message, file=None):
        # argparse drops a write that fails, so --help into a full disk would exit 0 having
        # printed nothing; here it raises, for the command's guard of its standard output
        # (yasgd.outputs.stdout_checked)
        if message:
            (file or sys.stderr).write(message)

    def parse_args(self, args=None, namespace=None):
        # argparse reports an unknown option of a sub-command from the top parser ("yasgd:
        # error: unrecognized arguments", its help the top one's); the line names the
        # sub-command that was chosen instead, and points to its help
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            self._chosen(ns).error("unrecognized arguments: " + " ".join(extras))
        return ns

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
