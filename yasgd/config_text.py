"""Checks of a config's text (the loader: yasgd.config), made by every command that reads a
config (``train``, ``check-config``, ``jobs``; ``yasgd launch`` through check-config): the
file's and the overrides' before it is loaded (among them, in :func:`load`, that YAML reads
each plain value as typed), and after it is loaded that the config reads every key they
set: a key that only another optimizer, model or data kind reads would otherwise be
accepted and do nothing."""
from __future__ import annotations

import re
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from yasgd import UsageError
from yasgd.config_checks import BASIC_DEPTHS, BOTTLENECK_DEPTHS, model_depth

#: what YAML reads as a line break (PyYAML: ``\n``, ``\r``, NEL, LS, PS), and NUL
_BREAKS = ("\n", "\r", "\x85", "\u2028", "\u2029", "\0")


def check_overrides(overrides: Sequence[str]) -> None:
    """UsageError where an override holds a line break or NUL, or is not of the form
    ``section.key=value`` (as :func:`yasgd.config.load` words it: also before a config is
    at hand, a job script's own). YAML folds a line break in a plain value into a space
    (``run.dir=a<newline>b`` would be ``a b``, another folder), and a job script carries
    each override on one line."""
    for item in overrides:
        if any(c in item for c in _BREAKS):
            raise UsageError(f"override {item!r} holds a line break or NUL: a value is one "
                             f"line (YAML would read a line break in it as a space)")
        if "=" not in item or "." not in item.split("=", 1)[0]:
            raise UsageError(f"override {item!r} is not of the form section.key=value")
        _check_whole_value(item)


def _check_whole_value(item: str) -> None:
    """UsageError where YAML reads only part of an override's value as the value: what
    follows `` #`` is a comment (``run.name=exp #2`` would be the name ``exp``), and ``|``
    or ``>`` opens a block of later lines, of which an override has none (the value would
    be empty). The job scripts carry the text as typed, so the run would differ from it."""
    import yaml
    name, _, value = item.partition("=")
    if not value:
        return
    try:
        node = _yaml(yaml.compose, value, f"override {_short(repr(item))}")
    except yaml.YAMLError:
        return                                  # the loader names it
    if node is None:                            # nothing but a comment
        rest = value.strip()
    elif isinstance(node, yaml.ScalarNode) and node.style in ("|", ">"):
        raise UsageError(f"override {_short(repr(item))}: YAML reads {node.style} as the start "
                         f"of a block of later lines, and an override is one line; "
                         f"{_QUOTE.format(name=name, text=value)}")
    else:
        rest = value[node.end_mark.index:].strip()
    if rest:
        raise UsageError(f"override {_short(repr(item))}: YAML reads {_short(repr(rest))} as a "
                         f"comment and leaves it out of the value; drop it, or "
                         f"{_QUOTE.format(name=name, text=value)}")


def check_no_yaml_alias(path: str) -> None:
    """UsageError where the config file uses a YAML alias (``*name``): a config holds plain
    values, and a few nested aliases stand for a value of billions of items, which any walk
    of it (printing it in an error among them) would take for ever to finish. Read as
    tokens only, so no value is built; a file that does not scan is left to the loader."""
    import yaml
    try:
        with open(path, "rb") as f:
            alias = _yaml(lambda text, Loader: next(
                (t for t in yaml.scan(text, Loader) if isinstance(t, yaml.AliasToken)), None),
                f.read(), f"config file {path} is not valid YAML")
    except (OSError, yaml.YAMLError):
        return
    if alias is not None:
        raise UsageError(f"config file {path} uses a YAML alias (*{alias.value}, line "
                         f"{alias.start_mark.line + 1}): a config holds plain values, each "
                         f"written out where it is used")


# -- plain values YAML reads as another value than the one typed ------------------------
_INT, _FLOAT, _TIME, _BOOL, _NULL = ("tag:yaml.org,2002:" + t for t in (
    "int", "float", "timestamp", "bool", "null"))
_LEADING_ZERO = re.compile(r"[-+]?0[0-9_]+")
_QUOTE = ("quote it to mean the text ({name}: '{text}' in a file, {name}=\"'{text}'\" in a "
          "shell)")


def _printable(number: int) -> bool:
    """Whether Python writes ``number`` in decimal (it refuses more than
    ``sys.get_int_max_str_digits()`` digits; octal, hex and binary have no such limit)."""
    try:
        str(number)
    except ValueError:
        return False
    return True


def _decimal(text: str) -> Optional[int]:
    """``text`` (digits, a sign, ``_``) read as a decimal number; None where it has more
    digits than Python reads in decimal (``sys.get_int_max_str_digits()``)."""
    try:
        return int(text.replace("_", ""), 10)
    except ValueError:
        return None


def _short(text: str) -> str:
    return text if len(text) <= 40 else f"{text[:24]}... ({len(text):,} characters)"


#: the deepest nesting a config's text may hold, in blocks and ``[`` / ``{`` together: a
#: config is sections of keys, a value at most a short list. PyYAML's scanner takes time
#: growing with the square of the ``[`` depth (each token revisits every open level), and
#: its composer recurses once a level.
MAX_DEPTH = 32


class _TooDeep(Exception):
    pass


def _loader():
    """yaml.SafeLoader that stops where the text opens its :data:`MAX_DEPTH` + 1st level."""
    import yaml

    class Shallow(yaml.SafeLoader):
        def _deeper(self, levels: int):
            if levels > MAX_DEPTH:
                raise _TooDeep

        def fetch_flow_collection_start(self, token_class):
            self._deeper(len(self.indents) + self.flow_level + 1)
            super().fetch_flow_collection_start(token_class)

        def add_indent(self, column):          # a block collection opens
            opens = super().add_indent(column)
            if opens:
                self._deeper(len(self.indents) + self.flow_level)
            return opens
    return Shallow


def _yaml(walk, stream, where: str):
    """``walk(stream, Loader)`` (a pass of ``yaml.scan`` or ``yaml.compose``) on a loader
    bounded in depth; UsageError naming ``where`` for a text nested deeper than a config
    is."""
    try:
        return walk(stream, _loader())
    except (_TooDeep, RecursionError):     # the bound's count is YAML's: a safeguard
        raise UsageError(f"{where}: nested more than {MAX_DEPTH} levels deep (a config "
                         f"value is a number, a word or a short list)") from None


def _plain_values(path, overrides: Sequence[str]) -> Iterator[Tuple[str, str, str, str]]:
    """(section.key, the text typed, its YAML tag, where it was typed) of every plain (not
    quoted) scalar the config file's sections and the overrides give a key (the last
    override of a key: the one the loader keeps)."""
    import yaml
    root = None
    if path:
        from yasgd.argtypes import check_config_file
        check_config_file(path)              # a FIFO or a huge file: refused before a read
        try:
            with open(path, "rb") as f:
                root = _yaml(yaml.compose, f, f"config file {path} is not valid YAML")
        except (OSError, yaml.YAMLError):    # the loader names what is wrong with the file
            pass
        for section, keys in (root.value if isinstance(root, yaml.MappingNode) else ()):
            for key, node in (keys.value if isinstance(keys, yaml.MappingNode) else ()):
                if isinstance(node, yaml.ScalarNode) and node.style is None:
                    name = f"{section.value}.{key.value}"
                    yield (name, node.value, node.tag, f"config key {name}="
                           f"{_short(node.value)} in {path} (line {node.start_mark.line + 1})")
    for name, item in _typed(overrides).items():
        if "=" not in item:                  # not an override: the loader says so
            continue
        try:
            node = _yaml(yaml.compose, item.split("=", 1)[1], f"override {_short(repr(item))}")
        except yaml.YAMLError:
            continue
        if isinstance(node, yaml.ScalarNode) and node.style is None:
            yield name, node.value, node.tag, f"override {_short(repr(item))}"


def check_plain_values(path, overrides: Sequence[str]) -> None:
    """UsageError where YAML (1.1, as PyYAML reads it) gives a plain value another meaning
    than its text: a free-text key (``run.name``, ``data.root``, ``mlperf.org``, ...) given
    a plain number or date, kept as the text of what YAML read (``010`` would be the name
    ``8``, ``1.50`` the name ``1.5``), or a flag or null (``NO``, ``off``, ``~``); a number
    with a leading zero, octal to YAML 1.1 (``010`` is 8) and decimal to YAML 1.2 and to a
    reader; a number with ``:``, base 60 to YAML 1.1 (``1:30`` is 90); a date for a key
    that takes no text. Other spellings of a number (``1_000``, ``0x10``, ``+5``, ``1.50``)
    are the number they say. Made before the loader, whose checks would see the value YAML
    read; a key it does not know, or a file it cannot read, is left to it."""
    import yaml
    from yasgd.config import schema
    from yasgd.config_checks import Line, Name
    checks = schema()
    for name, text, tag, where in _plain_values(path, overrides):
        section, _, key = name.partition(".")
        check = checks.get(section, {}).get(key)
        if check is None or tag not in (_INT, _FLOAT, _TIME, _BOOL, _NULL):
            continue
        text_key = isinstance(check, (Line, Name))      # free text: a name, a path, a label
        if tag in (_BOOL, _NULL):                       # no, off, ~: never text
            if text_key and text:
                what = "null (no value)" if tag == _NULL else "the flag " + (
                    "true" if text.lower() in ("yes", "true", "on") else "false")
                raise UsageError(f"{where}: YAML reads the plain {text} as {what}, not "
                                 f"text; {_QUOTE.format(name=name, text=text)}")
            continue
        try:
            read = yaml.safe_load(text)
        except (yaml.YAMLError, ValueError, OverflowError):   # 2019-02-30, 5,000 digits
            continue                                            # the loader refuses them
        # octal, hex or binary of thousands of digits: the loader's line could not print it
        if isinstance(read, int) and read.bit_length() > 64 and not _printable(read):
            raise UsageError(f"{where}: YAML reads {_short(text)} as a number of "
                             f"{read.bit_length():,} bits; no key takes one beyond 64 bits")
        shown, got = _short(text), _short(str(read))
        if text_key:
            if str(read) != text:
                what = "date" if tag == _TIME else "number"
                raise UsageError(f"{where}: YAML reads the plain {shown} as the {what} {got}, "
                                 f"so {name} would be {_short(repr(str(read)))}; "
                                 f"{_QUOTE.format(name=name, text=shown)}")
        elif tag == _TIME:                  # the loader would show Python's datetime(...)
            raise UsageError(f"{where}: YAML reads {text} as a date, and {name} must be "
                             f"{check.describe()}")
        elif ":" in text and tag in (_INT, _FLOAT):
            raise UsageError(f"{where}: YAML 1.1 reads {shown} as the base-60 number {got}; "
                             f"write the number as meant")
        elif tag == _INT and _LEADING_ZERO.fullmatch(text):
            decimal = _decimal(text)
            if decimal != read:
                meant = "the decimal number typed" if decimal is None else _short(str(decimal))
                raise UsageError(f"{where}: YAML 1.1 reads {shown} as the octal number {got}, "
                                 f"not {meant}; write the number as meant, without the "
                                 f"leading zero")


# -- keys the config does not read ------------------------------------------------------
def _small_resnet(name: str) -> bool:
    return model_depth(name) not in (None, *BASIC_DEPTHS, *BOTTLENECK_DEPTHS)


_LARS = ("optim.name", lambda v: v == "lars", "with optim.name=lars only")
_SMALL = ("model.name", _small_resnet, "by the CIFAR-style resnet<6n+2> only: the ImageNet "
                                       "ResNets have a 7x7 stem of stride 2 and fixed widths")
_FMNIST = ("data.kind", lambda v: v == "fashion_mnist", "with data.kind=fashion_mnist only")
_RECORDIO = ("data.kind", lambda v: v == "recordio", "with data.kind=recordio only")
_FILES = ("data.kind", lambda v: v != "synthetic", "with data.kind=fashion_mnist or recordio "
                                                  "only: synthetic data reads no files and "
                                                  "has data.synthetic_samples images")
_AUGMENTED = (*_FILES[:2], "with data.kind=fashion_mnist or recordio only: synthetic data is "
                           "never augmented")

#: the keys that only some configs read: key -> (the key that decides it, whether its value
#: reads the key, which values do, as the error says it); what reads them: yasgd.optim's
#: from_config, yasgd.model.build (its BN momentum: yasgd.train.build), the loaders of
#: yasgd.data and the header of yasgd.mlperf's log
READ_ONLY_WITH: Dict[str, Tuple[str, Callable[[object], bool], str]] = {
    **dict.fromkeys(("optim.eta", "optim.epsilon", "optim.momentum_correction",
                     "optim.wd_in_denominator", "optim.fused"), _LARS),
    "schedule.wd_schedule": (*_LARS[:2], "with optim.name=lars only: MXNet's SGD and NAG "
                                         "keep optim.wd constant"),
    **dict.fromkeys(("model.width", "model.stem_stride"), _SMALL),
    "model.bn_momentum": ("model.bn_momentum_rule", lambda v: v == "fixed",
                          "with model.bn_momentum_rule=fixed only: the iteration rule sets "
                          "the momentum from the BN updates per epoch"),
    "data.pad_crop": _FMNIST,
    **dict.fromkeys(("data.val_resize", "data.min_area", "data.polish_min_area",
                     "data.threads"), _RECORDIO),
    "data.synthetic_samples": ("data.kind", lambda v: v == "synthetic",
                               "with data.kind=synthetic only"),
    **dict.fromkeys(("data.root", "data.limit"), _FILES),
    **dict.fromkeys(("data.flip", "data.polish_epochs"), _AUGMENTED),
    **dict.fromkeys(("mlperf.division", "mlperf.org", "mlperf.platform", "mlperf.status"),
                    ("mlperf.enabled", lambda v: v is True,
                     "with mlperf.enabled=true only: they are fields of mlperf.log's header")),
}


def _typed(overrides: Sequence[str]) -> Dict[str, str]:
    """{section.key: the override as typed} (the last of a key wins, as in the loader)."""
    out = {}
    for item in overrides:
        section, _, key = item.split("=", 1)[0].partition(".")
        out[f"{section.strip()}.{key.strip()}"] = item
    return out


def _in_file(path) -> List[str]:
    """The section.key names the config file sets."""
    if not path:
        return []
    from yasgd.config_yaml import read_file
    return [f"{s}.{k}" for s, keys in read_file(path).items() if isinstance(keys, dict)
            for k in keys]


def _value(cfg, name: str):
    section, key = name.split(".")
    return getattr(getattr(cfg, section), key)


def _shown(cfg, name: str) -> str:
    """A key's value as a config writes it (``true``, not Python's ``True``)."""
    value = _value(cfg, name)
    return str(value).lower() if isinstance(value, bool) else str(value)


def _default(cfg, name: str):
    section, key = name.split(".")
    return getattr(type(getattr(cfg, section))(), key)


def check_read(cfg, overrides: Sequence[str], path=None) -> List[str]:
    """UsageError where a key that ``cfg`` (the config ``path`` and ``overrides`` loaded to)
    does not read is set to other than its default by an override, or by the file while the
    file also sets (or leaves at its default) what decides it: the run would not do what was
    asked. A key the file sets whose decider an override changed (one override switching a
    preset's optimizer, model or data) is no error: what it returns are the warnings that
    say so."""
    typed, unused = _typed(overrides), {}
    unread = {name: (decider, which) for name, (decider, reads, which)
              in READ_ONLY_WITH.items() if not reads(_value(cfg, decider))}
    for name, item in typed.items():
        if name in unread and _value(cfg, name) != _default(cfg, name):
            decider, which = unread[name]
            raise UsageError(f"override {item!r}: {decider}={_shown(cfg, decider)} does not "
                             f"read {name} (it is read {which}); drop the override, or "
                             f"change {decider}")
    for name in _in_file(path):
        if name not in unread or name in typed or _value(cfg, name) == _default(cfg, name):
            continue
        decider, which = unread[name]
        why = (f"{name}={_shown(cfg, name)}, which {decider}={_shown(cfg, decider)} does not "
               f"read (it is read {which})")
        if decider not in typed:
            raise UsageError(f"config file {path} sets {why}; remove it from the file, or "
                             f"change {decider}")
        unused.setdefault(decider, []).append(f"{name}={_shown(cfg, name)}")
    return [f"the override {typed[d]!r} leaves unread what config file {path} sets: "
            f"{', '.join(keys)}" for d, keys in unused.items()]


_RANK_VARS = ("OMPI_COMM_WORLD_RANK", "HOROVOD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")


#: the warnings of the configs :func:`load` loaded, until :func:`flush` says them
_pending: List[str] = []


def load(path, overrides: Sequence[str]):
    """:func:`yasgd.config.load`, then :func:`check_read`, whose warnings wait for
    :func:`flush`: a command says them once every check has passed, so that a config it
    refuses gets its one error line and nothing else."""
    from yasgd import config
    check_plain_values(path, overrides)
    cfg = config.load(path, list(overrides))
    _pending.extend(check_read(cfg, overrides, path))
    return cfg


def flush() -> None:
    """Write the pending warnings to stderr (from the first rank only, where a launcher
    started several), and forget them."""
    import sys

    from yasgd.envcheck import launcher_count
    from yasgd.usage import one_line
    rank = next((n for n in map(launcher_count, _RANK_VARS) if n is not None), 0)
    for line in _pending if rank == 0 else ():
        sys.stderr.write(f"yasgd: warning: {one_line(line)}\n")
    _pending.clear()
