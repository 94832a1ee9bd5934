"""Reading a config's YAML: the file (:func:`read_file`, every way it can be unusable
named in one line) and the right-hand side of a ``section.key=value`` override
(:func:`parse_scalar`, YAML's scalar rules). A key given twice in one mapping is an error:
YAML 1.2 forbids it, and PyYAML would keep the last one silently.
"""
from __future__ import annotations

import os
from typing import Any, Dict

import yaml

from yasgd import UsageError

__all__ = ["read_file", "parse_scalar"]


def parse_scalar(text: str) -> Any:
    """Parse the right-hand side of an override with YAML's scalar rules."""
    try:
        return yaml.safe_load(text) if text != "" else ""
    except (yaml.YAMLError, ValueError, OverflowError):   # e.g. an impossible date, 5,000 digits
        return text


class _DuplicateKey(yaml.constructor.ConstructorError):
    pass


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (YAML 1.2 forbids it;
    PyYAML would keep the last one silently). Keys merged in with ``<<`` may be overridden."""

    def construct_document(self, node):
        self._paths: Dict[int, str] = {}
        self._index(node, "", set())
        return super().construct_document(node)

    def _index(self, node, path: str, seen: set) -> None:
        if id(node) in seen:                     # an alias seen before (or a recursive one)
            return
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            self._paths[id(node)] = path
            for k, v in node.value:
                name = k.value if isinstance(k, yaml.ScalarNode) else "?"
                self._index(v, f"{path}.{name}" if path else str(name), seen)
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                self._index(v, f"{path}[{i}]", seen)

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for k, _ in node.value:
                if k.tag == "tag:yaml.org,2002:merge":
                    continue
                name = self.construct_object(k, deep=True)
                try:
                    dup = name in seen
                    seen.add(name)
                except TypeError:                # an unhashable key: the constructor says so
                    continue
                if dup:
                    prefix = self._paths.get(id(node), "")
                    raise _DuplicateKey(
                        None, None, f"duplicate key {prefix + '.' if prefix else ''}{name}",
                        k.start_mark)
        return super().construct_mapping(node, deep=deep)


def _yaml_problem(e: yaml.YAMLError) -> str:
    problem = getattr(e, "problem", None)
    mark = getattr(e, "problem_mark", None)
    if not problem:
        return " ".join(str(e).split())
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return f"{problem}{where}"


def read_file(path: str) -> Dict[str, Any]:
    """The sections of a YAML config file; an empty file holds none (all defaults)."""
    if os.path.isdir(path):
        raise UsageError(f"config file {path} is a directory")
    if not os.path.exists(path):
        raise UsageError(f"config file not found: {path}")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise UsageError(f"config file {path} cannot be read: {e.strerror or e}")
    if b"\x00" in data:
        raise UsageError(f"config file {path} is binary (it holds NUL bytes), not YAML text")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise UsageError(f"config file {path} is not UTF-8 text "
                         f"(byte 0x{data[e.start]:02x} at offset {e.start})")
    try:
        raw = yaml.load(text, Loader=_UniqueKeyLoader)
    except _DuplicateKey as e:
        raise UsageError(f"config file {path} has a {_yaml_problem(e)}")
    except yaml.YAMLError as e:
        raise UsageError(f"config file {path} is not valid YAML: {_yaml_problem(e)}")
    except (ValueError, OverflowError) as e:     # a scalar YAML cannot convert (date, huge int)
        raise UsageError(f"config file {path} holds a value YAML cannot read: "
                         f"{' '.join(str(e).split())[:120]}")
    except RecursionError:
        raise UsageError(f"config file {path} is not valid YAML: nested too deeply")
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise UsageError(f"config file {path} must hold a mapping of sections "
                         f"(such as 'train: {{epochs: 30}}'), got {type(raw).__name__} {raw!r:.40}")
    return raw
