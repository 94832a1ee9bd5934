"""The one configuration object: a YAML file plus ``section.key=value`` overrides.

Everything the run does is decided here, validated before any work (pycls'
``assert_cfg``), and dumped resolved into the run directory (``config.yaml``).
Every key declares its allowed values where it is defined (``key(default, check)``:
the check, one of :mod:`yasgd.config_checks`, lives in the field's metadata), and
:func:`check_values` applies them all, then the checks across keys; the YAML is read by
:mod:`yasgd.config_yaml`. Unknown keys, values of the wrong type or out of range
and impossible combinations raise :class:`yasgd.UsageError`, which the CLI prints
as one line with exit status 2.
"""
from __future__ import annotations

import dataclasses
import datetime
import os
from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Optional, get_type_hints

import yaml

from yasgd import UsageError
from yasgd.params import EXCLUDE_1D
from yasgd.config_checks import (BASIC_DEPTHS, BOTTLENECK_DEPTHS, INT64_MAX, Bool, Check,  # noqa: F401
                                 Float, Int, Line, LossScale, ModelName, Name, OneOf, Seconds,
                                 model_depth)
from yasgd.config_resolve import (DEVICES, FUSED_BN_RELU_ONLY, check_device,  # noqa: F401
                                  fused_bn_relu, hybridize, stall_timeout)
from yasgd.config_yaml import parse_scalar, read_file  # noqa: F401 -- read_file: public here too
from yasgd.grouping import DEFAULT_BUDGET_BYTES
from yasgd.writable import dir_problem


def key(default: Any, check: Check) -> Any:
    """A config field with its allowed values."""
    return field(default=default, metadata={"check": check})


UINT32 = 2 ** 32 - 1
TRISTATE = ("auto", "true", "false")


@dataclass
class RunCfg:
    name: str = key("run", Name())           # run directory name prefix
    dir: str = key("runs", Line("a path"))   # parent of run directories ("" = no run directory)
    seed: int = key(0, Int(0, UINT32))       # one seed on every rank (parallel initialization)
    # none | auto | a checkpoint or run directory (yasgd.checkpoint)
    resume: str = key("none", Line("none, auto or a path"))
    # seconds without a finished step before the watchdog stops the run; auto | 0 (off) | N
    stall_timeout_s: str = key("auto", Seconds())


@dataclass
class ModelCfg:
    # resnet8 | resnet20 | resnet56 (CIFAR-style) | resnet50_v1.5 | ...
    name: str = key("resnet8", ModelName())
    width: int = key(16, Int(1))             # channels of the first stage (small ResNets)
    # stride of the 3x3 stem of the small ResNets (2: 1/4 of the compute)
    stem_stride: int = key(1, Int(1))
    classes: int = key(10, Int(1))
    # moving-average decay of BN statistics; 0 = from bn_momentum_rule
    bn_momentum: float = key(0.9, Float(ge=0.0, lt=1.0))
    bn_momentum_rule: str = key("fixed", OneOf(("fixed", "iterations")))  # see model.bn_momentum_for
    bn_eps: float = key(1e-5, Float(gt=0.0))
    zero_init_last_gamma: bool = key(True, Bool())
    # MXNet's BatchNormWithReLU where BN is followed by ReLU: MXNet 1.9.1 has it only on the
    # CPU (MKLDNN) in float32. auto: fused there, BN + ReLU (cuDNN's BN on GPUs) elsewhere;
    # true: fused, refused on GPUs and in float16; false: never fused
    fused_bn_relu: str = key("false", OneOf(TRISTATE))
    # float32 | float16 (multi_precision master weights)
    dtype: str = key("float32", OneOf(("float32", "float16")))


@dataclass
class DataCfg:
    kind: str = key("fashion_mnist", OneOf(("fashion_mnist", "recordio", "synthetic")))
    root: str = key("/usr/share/datasets/fashion-mnist", Line("a path"))
    image_size: int = key(28, Int(1))        # training crop size
    val_resize: int = key(256, Int(1))       # recordio: shorter side before the centre crop
    pad_crop: int = key(2, Int(0))           # fashion_mnist: random crop from a zero-padded image
    flip: bool = key(True, Bool())
    min_area: float = key(0.08, Float(gt=0.0, le=1.0))   # recordio: random-resized-crop area range
    # "final polishing": last K epochs nearly without augmentation
    polish_epochs: int = key(0, Int(0))
    polish_min_area: float = key(0.999, Float(gt=0.0, le=1.0))
    threads: int = key(2, Int(1))            # decoding threads (recordio)
    limit: int = key(0, Int(0))              # use only the first N training samples (0 = all)
    # what evaluation reads: the test set, or (fashion_mnist) the training images after the
    # first data.limit, a validation split never trained on
    eval_set: str = key("test", OneOf(("test", "holdout")))
    eval_limit: int = key(0, Int(0))         # fashion_mnist: evaluate the first N only (0 = all)
    synthetic_samples: int = key(4096, Int(1))


@dataclass
class OptimCfg:
    name: str = key("lars", OneOf(("lars", "sgd", "nag")))
    lr: float = key(1.0, Float(gt=0.0))      # peak (base) learning rate after warm-up
    momentum: float = key(0.9, Float(ge=0.0, lt=1.0))
    wd: float = key(5e-5, Float(ge=0.0))
    eta: float = key(0.001, Float(gt=0.0))   # LARS trust coefficient
    epsilon: float = key(0.0, Float(ge=0.0))  # LARS denominator epsilon
    momentum_correction: bool = key(False, Bool())
    wd_in_denominator: bool = key(True, Bool())
    # what tensors with ndim <= 1 (BN gamma/beta, biases) are left out of: LARS and weight
    # decay (every large-batch recipe), weight decay only, or nothing (the LARS rule applied
    # to every tensor)
    exclude_1d: str = key("lars_and_wd", OneOf(EXCLUDE_1D))
    fused: bool = key(True, Bool())          # batched-norm fused path (False: per-layer reference path)
    multi_precision: bool = key(False, Bool())


@dataclass
class ScheduleCfg:
    warmup_epochs: float = key(5.0, Float(ge=0.0))     # <= train.epochs
    warmup_begin_lr: float = key(0.0, Float(ge=0.0))   # <= optim.lr
    power: float = key(2.0, Float(gt=0.0))             # polynomial decay power
    end_lr: float = key(0.0, Float(ge=0.0))            # <= optim.lr
    # constant | follow_lr (WD warms up and decays with the LR)
    wd_schedule: str = key("constant", OneOf(("constant", "follow_lr")))


@dataclass
class TrainCfg:
    epochs: int = key(30, Int(1))
    global_batch: int = key(4096, Int(1))
    batch_per_rank: int = key(0, Int(0))     # 0 = global_batch / (ranks * accumulate)
    accumulate: int = key(1, Int(1))         # micro-batches per step (gradient accumulation)
    label_smoothing: float = key(0.1, Float(ge=0.0, lt=1.0))
    eval_every: int = key(1, Int(1))         # evaluate every N epochs ...
    # ... at epochs where (epoch + 1 - offset) % N == 0, and at the end
    eval_offset: int = key(0, Int(0))
    target_accuracy: float = key(0.0, Float(ge=0.0, le=1.0))  # stop once reached (0 = never)
    log_interval: int = key(20, Int(1))      # steps between metric reductions (sync points)
    checkpoint_every: int = key(0, Int(0))   # epochs between checkpoints (0 = only at the end)
    keep_checkpoints: int = key(2, Int(0))   # newest checkpoints kept (0 = write none)
    # re-estimate BN statistics on N un-augmented batches before eval
    bn_recalibrate_batches: int = key(0, Int(0))
    progress: bool = key(True, Bool())
    # auto: hybridized for ImageNet ResNets (ResNet-50 ran faster so on CPU), imperative
    # for the CIFAR-style resnet<6n+2> (which ran faster imperative in MXNet 1.9.1 on CPU)
    # and whenever bn_recalibrate_batches is set; true | false force it
    hybridize: str = key("auto", OneOf(TRISTATE))
    max_steps: int = key(0, Int(0))          # stop after N steps (0 = run all epochs); for tests and benches
    # none | dynamic | N: the loss is multiplied by the scale before backward and the gradients
    # divided by it in the update; dynamic skips a step whose gradients overflow and halves
    # the scale, doubling it after loss_scale_window good steps (yasgd.loss_scale)
    loss_scale: str = key("none", LossScale())
    loss_scale_window: int = key(2000, Int(1))


@dataclass
class CommCfg:
    # static allreduce groups of about this many bytes (yasgd.grouping's rule and default)
    group_budget_bytes: int = key(DEFAULT_BUDGET_BYTES, Int(1))
    num_groups: int = key(0, Int(0))         # > 0 overrides the byte budget
    fp16_compression: bool = key(False, Bool())
    # gradients divided by this before the sum over ranks and multiplied after it, so that a
    # sum over thousands of ranks stays within float16's range on the wire (Horovod's
    # prescale/postscale factors); 1 = plain sum
    gradient_predivide_factor: float = key(1.0, Float(gt=0.0))
    init: str = key("parallel", OneOf(("parallel", "broadcast")))
    check_init: bool = key(True, Bool())     # checksum agreement across ranks after init
    # grouped | horovod (Horovod's stock DistributedTrainer)
    trainer: str = key("grouped", OneOf(("grouped", "horovod")))


@dataclass
class MlperfCfg:
    """The MLPerf-format log (yasgd.mlperf): ``mlperf.log`` in the run directory."""
    enabled: bool = key(True, Bool())
    # open | closed (closed: ImageNet target and MLPerf's LARS values)
    division: str = key("open", OneOf(("open", "closed")))
    org: str = key("yasgd", Line(nonempty=True))          # submission_org
    # submission_platform ("" = <host>-<ranks>x<cpu|gpu>)
    platform: str = key("", Line())
    # submission_status
    status: str = key("research", OneOf(("cloud", "onprem", "preview", "research")))


@dataclass
class Config:
    run: RunCfg = field(default_factory=RunCfg)
    model: ModelCfg = field(default_factory=ModelCfg)
    data: DataCfg = field(default_factory=DataCfg)
    optim: OptimCfg = field(default_factory=OptimCfg)
    schedule: ScheduleCfg = field(default_factory=ScheduleCfg)
    train: TrainCfg = field(default_factory=TrainCfg)
    comm: CommCfg = field(default_factory=CommCfg)
    mlperf: MlperfCfg = field(default_factory=MlperfCfg)

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    def dump(self, path: str) -> None:
        with open(path, "w") as f:
            yaml.safe_dump(self.to_dict(), f, sort_keys=False)


def schema() -> Dict[str, Dict[str, Check]]:
    """``{section: {key: check}}`` for every key, in declaration order."""
    return {s.name: {f.name: f.metadata["check"] for f in fields(s.default_factory)}
            for s in fields(Config)}


def _bad(where: str, check: Check, value: Any, origin: str = "") -> UsageError:
    what = check.describe()
    if isinstance(check, Int) and isinstance(value, int) and abs(value) > INT64_MAX:
        what += " that fits in 64 bits"
    shown = repr(value)
    if isinstance(value, int) and len(shown) > 20:
        shown = f"{shown[:12]}... ({len(shown.lstrip('-'))} digits)"
    elif len(shown) > 80:
        shown = shown[:60] + f"... ({len(shown)} characters)"
    return UsageError(f"config key {where} must be {what}, got {shown}{origin}")


def _coerce(where: str, typ: type, check: Check, value: Any, origin: str = "") -> Any:
    """``value`` (from YAML or an override) as ``typ``; strings are parsed, nothing is rounded."""
    if typ is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "yes", "1", "on", "false", "no", "0", "off"):
            return value.lower() in ("true", "yes", "1", "on")
    elif typ is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                pass
    elif typ is float:
        try:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
            if isinstance(value, str):
                return float(value)
        except (ValueError, OverflowError):
            pass
    elif typ is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float, datetime.date)) and not isinstance(value, bool):
            return str(value)                    # YAML read 5, 1.5 or 2019-04-01 as non-text
    else:
        raise AssertionError(typ)
    raise _bad(where, check, value, origin)


def _apply(cfg: Config, section: str, key: str, value: Any, origin: str = "") -> None:
    sections = {f.name: f for f in fields(Config)}
    if section not in sections:
        raise UsageError(f"unknown config section {section!r}{origin} (known: {', '.join(sections)})")
    sub = getattr(cfg, section)
    hints = get_type_hints(type(sub))
    if key not in hints:
        raise UsageError(f"unknown config key {section}.{key}{origin} "
                         f"(known in {section}: {', '.join(hints)})")
    where = f"{section}.{key}"
    check = schema()[section][key]
    if isinstance(check, OneOf) and check.choices == TRISTATE:   # auto | true | false
        if isinstance(value, bool):
            value = "true" if value else "false"                  # YAML's true/false
        elif isinstance(value, str):
            value = value.lower()
    value = _coerce(where, hints[key], check, value, origin)
    if not check.ok(value):
        raise _bad(where, check, value, origin)
    setattr(sub, key, value)


def load(path: Optional[str] = None, overrides: Optional[List[str]] = None) -> Config:
    """Build a Config from an optional YAML file and ``section.key=value`` overrides.

    Does not check anything that depends on the world size or the file system;
    see :func:`per_rank_batch` and :func:`check_run_dir`.
    """
    cfg = Config()
    if path is not None:
        known = [f.name for f in fields(Config)]
        for section, values in read_file(path).items():
            if str(section) not in known:
                raise UsageError(f"unknown config section {str(section)!r} (in {path}) "
                                 f"(known: {', '.join(known)})")
            if values is not None and not isinstance(values, dict):
                raise UsageError(f"config section {section!r} in {path} must be a mapping of keys, "
                                 f"got {type(values).__name__} {values!r:.40}")
            for key, value in (values or {}).items():   # "train:" alone = no keys
                _apply(cfg, str(section), str(key), value, origin=f" (in {path})")
    for item in overrides or []:
        if "=" not in item or "." not in item.split("=", 1)[0]:
            raise UsageError(f"override {item!r} is not of the form section.key=value")
        lhs, rhs = item.split("=", 1)
        section, key = lhs.split(".", 1)
        _apply(cfg, section.strip(), key.strip(), parse_scalar(rhs))
    check_values(cfg)
    return cfg


def check_values(cfg: Config) -> None:
    """Every key against its declared check, then the checks across keys.

    Needs nothing but the config itself (no world size, no file system).
    """
    for section, checks in schema().items():
        sub = getattr(cfg, section)
        for key, check in checks.items():
            value = getattr(sub, key)
            if not check.ok(value):
                raise _bad(f"{section}.{key}", check, value)
    t, o, s, d = cfg.train, cfg.optim, cfg.schedule, cfg.data
    if s.warmup_epochs > t.epochs:
        raise UsageError(f"config key schedule.warmup_epochs must be in [0, train.epochs={t.epochs}], "
                         f"got {s.warmup_epochs}")
    if s.end_lr > o.lr:
        raise UsageError(f"config key schedule.end_lr ({s.end_lr}) exceeds optim.lr ({o.lr})")
    if s.warmup_begin_lr > o.lr:
        raise UsageError(f"config key schedule.warmup_begin_lr ({s.warmup_begin_lr}) exceeds "
                         f"optim.lr ({o.lr})")
    if d.polish_epochs > t.epochs:
        raise UsageError(f"config key data.polish_epochs must be in [0, train.epochs={t.epochs}], "
                         f"got {d.polish_epochs}")
    if d.eval_set == "holdout" and (d.kind != "fashion_mnist" or not d.limit):
        raise UsageError("config key data.eval_set=holdout needs data.kind=fashion_mnist and "
                         "data.limit > 0 (the held-out images are those after the first "
                         "data.limit)")
    if d.eval_limit and d.kind != "fashion_mnist":
        raise UsageError("config key data.eval_limit needs data.kind=fashion_mnist")
    if d.kind == "recordio" and d.val_resize < d.image_size:
        raise UsageError(f"config key data.val_resize ({d.val_resize}) must be >= data.image_size "
                         f"({d.image_size}): the validation crop is cut from the resized image")
    if t.bn_recalibrate_batches and t.hybridize == "true":
        raise UsageError("train.bn_recalibrate_batches needs train.hybridize=false "
                         "(the per-batch BN momentum is set on the imperative layers)")
    if cfg.model.fused_bn_relu == "true" and cfg.model.dtype == "float16":
        raise UsageError(FUSED_BN_RELU_ONLY + " (model.dtype is float16)")
    if cfg.run.resume not in ("none", "") and not cfg.run.dir:
        raise UsageError("config key run.resume needs a run directory (run.dir is empty)")


def check_run_dir(cfg: Config) -> None:
    """Before any work: ``run.dir`` must be (or become) a writable directory. A run resumed
    from an explicit checkpoint continues in that checkpoint's directory instead."""
    if not cfg.run.dir or cfg.run.resume not in ("none", "", "auto"):
        return
    problem = dir_problem(cfg.run.dir)
    if problem:
        raise UsageError(f"run directory {os.path.abspath(cfg.run.dir)} is not writable: {problem} "
                         f"(config key run.dir)")


def per_rank_batch(cfg: Config, world_size: int) -> int:
    """The micro-batch each rank computes: global = world_size * per_rank * accumulate.

    Raises UsageError when the global batch cannot be split that way.
    """
    t = cfg.train
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise UsageError(f"the world size must be an integer >= 1, got {world_size!r}")
    if t.batch_per_rank:
        if world_size * t.batch_per_rank * t.accumulate != t.global_batch:
            raise UsageError(
                f"train.global_batch={t.global_batch} is not ranks ({world_size}) x "
                f"train.batch_per_rank ({t.batch_per_rank}) x train.accumulate ({t.accumulate}) "
                f"= {world_size * t.batch_per_rank * t.accumulate}")
        return t.batch_per_rank
    if t.global_batch % (world_size * t.accumulate):
        raise UsageError(
            f"train.global_batch={t.global_batch} is not divisible by ranks ({world_size}) x "
            f"train.accumulate ({t.accumulate}) = {world_size * t.accumulate}")
    return t.global_batch // (world_size * t.accumulate)
