"""The one configuration object: a YAML file plus ``section.key=value`` overrides.

Everything the run does is decided here, validated before any work (pycls'
``assert_cfg``), and dumped resolved into the run directory (``config.yaml``).
Unknown keys, values of the wrong type and impossible combinations raise
:class:`yasgd.UsageError`, which the CLI prints as one line with exit status 2.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Optional, get_type_hints

import yaml

from yasgd import UsageError


@dataclass
class RunCfg:
    name: str = "run"             # run directory name prefix
    dir: str = "runs"             # parent of run directories ("" = no run directory)
    seed: int = 0                 # one seed on every rank (parallel initialization)
    resume: str = "none"          # none | auto | a checkpoint or run directory (yasgd.checkpoint)


@dataclass
class ModelCfg:
    name: str = "resnet8"         # resnet8 | resnet20 | resnet56 (CIFAR-style) | resnet50_v1.5 | ...
    width: int = 16               # channels of the first stage (small ResNets)
    stem_stride: int = 1          # stride of the 3x3 stem of the small ResNets (2: 1/4 of the compute)
    classes: int = 10
    bn_momentum: float = 0.9      # moving-average decay of BN statistics; 0 = from bn_momentum_rule
    bn_momentum_rule: str = "fixed"  # fixed | iterations (see model.bn_momentum_for)
    bn_eps: float = 1e-5
    zero_init_last_gamma: bool = True
    fused_bn_relu: bool = False   # BatchNormWithReLU where BN is followed by ReLU
    dtype: str = "float32"        # float32 | float16 (multi_precision master weights)


@dataclass
class DataCfg:
    kind: str = "fashion_mnist"   # fashion_mnist | recordio | synthetic
    root: str = "/usr/share/datasets/fashion-mnist"
    image_size: int = 28          # training crop size
    val_resize: int = 256         # recordio: shorter side before the centre crop
    pad_crop: int = 2             # fashion_mnist: random crop from a zero-padded image
    flip: bool = True
    min_area: float = 0.08        # recordio: random-resized-crop area range
    polish_epochs: int = 0        # "final polishing": last K epochs nearly without augmentation
    polish_min_area: float = 0.999
    threads: int = 2              # decoding threads (recordio)
    limit: int = 0                # use only the first N training samples (0 = all)
    synthetic_samples: int = 4096


@dataclass
class OptimCfg:
    name: str = "lars"            # lars | sgd | nag
    lr: float = 1.0               # peak (base) learning rate after warm-up
    momentum: float = 0.9
    wd: float = 5e-5
    eta: float = 0.001            # LARS trust coefficient
    epsilon: float = 0.0          # LARS denominator epsilon
    momentum_correction: bool = False
    wd_in_denominator: bool = True
    fused: bool = True            # batched-norm fused path (False: per-layer reference path)
    multi_precision: bool = False


@dataclass
class ScheduleCfg:
    warmup_epochs: float = 5.0
    warmup_begin_lr: float = 0.0
    power: float = 2.0            # polynomial decay power
    end_lr: float = 0.0
    wd_schedule: str = "constant"  # constant | follow_lr (WD warms up and decays with the LR)


@dataclass
class TrainCfg:
    epochs: int = 30
    global_batch: int = 4096
    batch_per_rank: int = 0       # 0 = global_batch / (ranks * accumulate)
    accumulate: int = 1           # micro-batches per step (gradient accumulation)
    label_smoothing: float = 0.1
    eval_every: int = 1           # evaluate every N epochs ...
    eval_offset: int = 0          # ... at epochs where (epoch + 1 - offset) % N == 0, and at the end
    target_accuracy: float = 0.0  # stop once reached (0 = never)
    log_interval: int = 20        # steps between metric reductions (sync points)
    checkpoint_every: int = 0     # epochs between checkpoints (0 = only at the end)
    keep_checkpoints: int = 2     # newest checkpoints kept (0 = write none)
    bn_recalibrate_batches: int = 0  # re-estimate BN statistics on N un-augmented batches before eval
    progress: bool = True
    # auto: hybridized for ImageNet ResNets (ResNet-50: 1.10x faster on this CPU), imperative
    # for the CIFAR-style resnet<6n+2> (2-3x faster imperative in MXNet 1.9.1 on CPU) and
    # whenever bn_recalibrate_batches is set; true | false force it (README, "Speed")
    hybridize: str = "auto"
    max_steps: int = 0            # stop after N steps (0 = run all epochs); for tests and benches


@dataclass
class CommCfg:
    group_budget_bytes: int = 4 << 20   # static allreduce groups of about this many bytes
    num_groups: int = 0                 # > 0 overrides the byte budget
    fp16_compression: bool = False
    init: str = "parallel"              # parallel | broadcast
    check_init: bool = True             # checksum agreement across ranks after init
    trainer: str = "grouped"            # grouped | horovod (Horovod's stock DistributedTrainer)


@dataclass
class MlperfCfg:
    """The MLPerf-format log (yasgd.mlperf): ``mlperf.log`` in the run directory."""
    enabled: bool = True
    division: str = "open"        # open | closed (closed: ImageNet target and MLPerf's LARS values)
    org: str = "yasgd"            # submission_org
    platform: str = ""            # submission_platform ("" = <host>-<ranks>x<cpu|gpu>)
    status: str = "research"      # submission_status: cloud | onprem | preview | research


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


CHOICES = {
    ("run", "resume"): None,  # free-form (none | auto | path)
    ("model", "bn_momentum_rule"): ("fixed", "iterations"),
    ("model", "dtype"): ("float32", "float16"),
    ("data", "kind"): ("fashion_mnist", "recordio", "synthetic"),
    ("optim", "name"): ("lars", "sgd", "nag"),
    ("schedule", "wd_schedule"): ("constant", "follow_lr"),
    ("comm", "init"): ("parallel", "broadcast"),
    ("comm", "trainer"): ("grouped", "horovod"),
    ("train", "hybridize"): ("auto", "true", "false"),
    ("mlperf", "division"): ("open", "closed"),
    ("mlperf", "status"): ("cloud", "onprem", "preview", "research"),
}


def _coerce(section: str, key: str, typ: type, value: Any) -> Any:
    where = f"{section}.{key}"
    if typ is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "yes", "1", "on", "false", "no", "0", "off"):
            return value.lower() in ("true", "yes", "1", "on")
        raise UsageError(f"config key {where} must be a boolean, got {value!r}")
    if typ is int:
        if isinstance(value, bool):
            raise UsageError(f"config key {where} must be an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                pass
        raise UsageError(f"config key {where} must be an integer, got {value!r}")
    if typ is float:
        if isinstance(value, bool):
            raise UsageError(f"config key {where} must be a number, got {value!r}")
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        raise UsageError(f"config key {where} must be a number, got {value!r}")
    if typ is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise UsageError(f"config key {where} must be a string, got {value!r}")
    raise AssertionError(typ)


def _apply(cfg: Config, section: str, key: str, value: Any) -> None:
    sections = {f.name: f for f in fields(Config)}
    if section not in sections:
        raise UsageError(f"unknown config section {section!r} (known: {', '.join(sections)})")
    sub = getattr(cfg, section)
    hints = get_type_hints(type(sub))
    if key not in hints:
        raise UsageError(f"unknown config key {section}.{key} (known in {section}: {', '.join(hints)})")
    choices = CHOICES.get((section, key))
    if choices and "true" in choices and "false" in choices:   # a tri-state key (auto|true|false)
        if isinstance(value, bool):
            value = "true" if value else "false"                # YAML's true/false
        elif isinstance(value, str):
            value = value.lower()
    value = _coerce(section, key, hints[key], value)
    if choices and value not in choices:
        raise UsageError(f"config key {section}.{key} must be one of {', '.join(choices)}, got {value!r}")
    setattr(sub, key, value)


def hybridize(cfg: Config) -> bool:
    """Whether ``yasgd train`` hybridizes the network (``train.hybridize``, resolving auto)."""
    h = cfg.train.hybridize
    if h != "auto":
        return h == "true"
    from yasgd import model
    return model.imagenet_style(cfg.model.name) and not cfg.train.bn_recalibrate_batches


def _parse_scalar(text: str) -> Any:
    """Parse the right-hand side of an override with YAML's scalar rules."""
    try:
        return yaml.safe_load(text) if text != "" else ""
    except yaml.YAMLError:
        return text


def load(path: Optional[str] = None, overrides: Optional[List[str]] = None) -> Config:
    """Build a Config from an optional YAML file and ``section.key=value`` overrides.

    Does not check anything that depends on the world size or the file system;
    see :func:`validate`.
    """
    cfg = Config()
    if path is not None:
        if not os.path.isfile(path):
            raise UsageError(f"config file not found: {path}")
        with open(path) as f:
            try:
                raw = yaml.safe_load(f) or {}
            except yaml.YAMLError as e:
                raise UsageError(f"config file {path} is not valid YAML: {str(e).splitlines()[0]}")
        if not isinstance(raw, dict):
            raise UsageError(f"config file {path} must hold a mapping of sections")
        for section, values in raw.items():
            if not isinstance(values, dict):
                raise UsageError(f"config section {section!r} in {path} must be a mapping")
            for key, value in values.items():
                _apply(cfg, str(section), str(key), value)
    for item in overrides or []:
        if "=" not in item or "." not in item.split("=", 1)[0]:
            raise UsageError(f"override {item!r} is not of the form section.key=value")
        lhs, rhs = item.split("=", 1)
        section, key = lhs.split(".", 1)
        _apply(cfg, section.strip(), key.strip(), _parse_scalar(rhs))
    check_values(cfg)
    return cfg


def check_values(cfg: Config) -> None:
    """Checks that need nothing but the config itself."""
    t, o, s = cfg.train, cfg.optim, cfg.schedule
    positive = {"train.epochs": t.epochs, "train.global_batch": t.global_batch,
                "train.accumulate": t.accumulate, "train.log_interval": t.log_interval,
                "train.eval_every": t.eval_every, "optim.lr": o.lr}
    for name, value in positive.items():
        if value <= 0:
            raise UsageError(f"config key {name} must be positive, got {value}")
    if t.batch_per_rank < 0:
        raise UsageError(f"config key train.batch_per_rank must be >= 0, got {t.batch_per_rank}")
    if not 0.0 <= t.label_smoothing < 1.0:
        raise UsageError(f"config key train.label_smoothing must be in [0, 1), got {t.label_smoothing}")
    if not 0.0 <= o.momentum < 1.0:
        raise UsageError(f"config key optim.momentum must be in [0, 1), got {o.momentum}")
    if s.warmup_epochs < 0 or s.warmup_epochs > t.epochs:
        raise UsageError(f"config key schedule.warmup_epochs must be in [0, train.epochs={t.epochs}], "
                         f"got {s.warmup_epochs}")
    if s.end_lr > o.lr:
        raise UsageError(f"config key schedule.end_lr ({s.end_lr}) exceeds optim.lr ({o.lr})")
    if cfg.data.polish_epochs < 0 or cfg.data.polish_epochs > t.epochs:
        raise UsageError(f"config key data.polish_epochs must be in [0, {t.epochs}], got {cfg.data.polish_epochs}")
    if t.bn_recalibrate_batches and t.hybridize == "true":
        raise UsageError("train.bn_recalibrate_batches needs train.hybridize=false "
                         "(the per-batch BN momentum is set on the imperative layers)")
    if not 0.0 <= cfg.model.bn_momentum < 1.0:
        raise UsageError(f"config key model.bn_momentum must be in [0, 1), got {cfg.model.bn_momentum}")
    if cfg.run.resume not in ("none", "") and not cfg.run.dir:
        raise UsageError("config key run.resume needs a run directory (run.dir is empty)")
    if t.checkpoint_every < 0 or t.keep_checkpoints < 0:
        raise UsageError("config keys train.checkpoint_every and train.keep_checkpoints must be >= 0")


def per_rank_batch(cfg: Config, world_size: int) -> int:
    """The micro-batch each rank computes: global = world_size * per_rank * accumulate.

    Raises UsageError when the global batch cannot be split that way.
    """
    t = cfg.train
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
