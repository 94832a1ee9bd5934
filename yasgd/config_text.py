"""Checks of a config file's text before it is loaded (the loader: yasgd.config), made by
every command that reads a config (``train``, ``check-config``, ``jobs``; ``yasgd launch``
through check-config)."""
from __future__ import annotations

from yasgd import UsageError


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
