"""Checks of a config's text before it is loaded (the loader: yasgd.config), made by every
command that reads a config (``train``, ``check-config``, ``jobs``; ``yasgd launch``
through check-config): the file's, and the overrides'."""
from __future__ import annotations

from typing import Sequence

from yasgd import UsageError

#: what YAML reads as a line break (PyYAML: ``\n``, ``\r``, NEL, LS, PS), and NUL
_BREAKS = ("\n", "\r", "\x85", "\u2028", "\u2029", "\0")


def check_overrides(overrides: Sequence[str]) -> None:
    """UsageError where an override holds a line break or NUL. YAML folds a line break in
    a plain value into a space (``run.dir=a<newline>b`` would be ``a b``, another
    folder), and a job script carries each override on one line."""
    for item in overrides:
        if any(c in item for c in _BREAKS):
            raise UsageError(f"override {item!r} holds a line break or NUL: a value is one "
                             f"line (YAML would read a line break in it as a space)")


def check_no_yaml_alias(path: str) -> None:
    """UsageError where the config file uses a YAML alias (``*name``): a config holds plain
    values, and a few nested aliases stand for a value of billions of items, which any walk
    of it (printing it in an error among them) would take for ever to finish. Read as
    tokens only, so no value is built; a file that does not scan is left to the loader."""
    import yaml
    try:
        with open(path, "rb") as f:
            tokens = yaml.scan(f.read())
            alias = next((t for t in tokens if isinstance(t, yaml.AliasToken)), None)
    except (OSError, yaml.YAMLError):
        return
    if alias is not None:
        raise UsageError(f"config file {path} uses a YAML alias (*{alias.value}, line "
                         f"{alias.start_mark.line + 1}): a config holds plain values, each "
                         f"written out where it is used")
