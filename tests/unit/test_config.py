"""Config: file + overrides, validation before any work, one-line errors with exit 2."""
import os
import subprocess
import sys

import pytest
from yasgd import UsageError, config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PRESETS = os.path.join(ROOT, "examples", "configs")


def run_cli(*args, env_extra=None):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "yasgd.cli", *args], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=120)


def test_overrides_are_typed():
    cfg = config.load(None, ["train.epochs=7", "optim.lr=0.5", "optim.fused=false",
                             "model.name=resnet20"])
    assert cfg.train.epochs == 7 and cfg.optim.lr == 0.5
    assert cfg.optim.fused is False and cfg.model.name == "resnet20"


def test_dump_round_trip(tmp_path):
    cfg = config.load(None, ["train.global_batch=512", "schedule.power=2.2"])
    path = tmp_path / "c.yaml"
    cfg.dump(str(path))
    again = config.load(str(path))
    assert again.to_dict() == cfg.to_dict()


@pytest.mark.parametrize("override, words", [
    (["train.nonsense=1"], "unknown config key train.nonsense"),
    (["bogus.x=1"], "unknown config section"),
    (["train.epochs=ten"], "train.epochs must be an integer"),
    (["optim.lr=fast"], "optim.lr must be a finite number > 0"),
    (["optim.fused=maybe"], "optim.fused must be a boolean"),
    (["optim.name=adam"], "optim.name must be one of"),
    (["schedule.warmup_epochs=100"], "warmup_epochs"),
    (["train.hybridize=sometimes"], "train.hybridize must be one of auto, true, false"),
    (["train.hybridize=true", "train.bn_recalibrate_batches=4"], "needs train.hybridize=false"),
])
def test_bad_values_raise(override, words):
    with pytest.raises(UsageError, match=words):
        config.load(None, override)


@pytest.mark.parametrize("value, want", [("auto", None), ("0", 0.0), ("90", 90.0), ("2.5", 2.5),
                                         ("1e3", 1000.0)])
def test_stall_timeout(value, want):
    cfg = config.load(None, [f"run.stall_timeout_s={value}"])
    assert config.stall_timeout(cfg) == want
    assert config.stall_timeout(config.load(None)) is None       # default: auto


@pytest.mark.parametrize("value", ["-1", "soon", ".nan", ".inf", "nan", "[]"])
def test_stall_timeout_rejects(value):
    with pytest.raises(UsageError, match="run.stall_timeout_s must be auto or a finite number"):
        config.load(None, [f"run.stall_timeout_s={value}"])


def test_section_left_empty_means_defaults(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("train:\noptim: {}\n")
    assert config.load(str(path)).to_dict() == config.Config().to_dict()


def test_merge_keys_may_be_overridden(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("schedule: {warmup_epochs: 1}\ntrain: {<<: {epochs: 3, global_batch: 64}, epochs: 4}\n")
    cfg = config.load(str(path))
    assert (cfg.train.epochs, cfg.train.global_batch) == (4, 64)


@pytest.mark.parametrize("overrides, want", [
    (["model.name=resnet50_v1.5"], True),          # auto: ImageNet ResNets hybridized
    (["model.name=resnet18"], True),
    (["model.name=resnet8"], False),               # auto: CIFAR-style ones imperative
    (["model.name=resnet56"], False),
    (["model.name=resnet50_v1.5", "train.bn_recalibrate_batches=4"], False),
    (["model.name=resnet50_v1.5", "train.hybridize=false"], False),
    (["model.name=resnet8", "train.hybridize=true"], True),
    (["model.name=resnet8", "train.hybridize=True"], True),
])
def test_hybridize_auto(overrides, want):
    cfg = config.load(None, overrides)
    assert config.hybridize(cfg) is want
    assert config.load(None, ["train.hybridize=false"]).train.hybridize == "false"


@pytest.mark.parametrize("world, g, bpr, acc, ok", [
    (2, 4096, 0, 1, 2048), (2, 4096, 1024, 2, 1024), (4, 81920, 0, 1, 20480),
    (3, 4096, 0, 1, None), (2, 4096, 1000, 1, None), (2, 4096, 0, 3, None),
])
def test_batch_split(world, g, bpr, acc, ok):
    cfg = config.load(None, [f"train.global_batch={g}", f"train.batch_per_rank={bpr}",
                             f"train.accumulate={acc}"])
    if ok is None:
        with pytest.raises(UsageError, match="global_batch"):
            config.per_rank_batch(cfg, world)
    else:
        assert config.per_rank_batch(cfg, world) == ok


# The world size each preset is written for, and the per-rank batch it must give.
PRESET_WORLD = {"paper.yaml": (2048, 40), "mlperf_v06.yaml": (2048, 42), "lars_32k.yaml": (512, 64),
                "demo.yaml": (2, 512), "tiny.yaml": (2, 128)}


def test_every_preset_is_listed():
    assert sorted(f for f in os.listdir(PRESETS) if f.endswith(".yaml")) == sorted(PRESET_WORLD)


@pytest.mark.parametrize("name", sorted(PRESET_WORLD))
def test_presets_load_and_validate(name):
    cfg = config.load(os.path.join(PRESETS, name))
    world, per_rank = PRESET_WORLD[name]
    assert config.per_rank_batch(cfg, world) == per_rank


def test_paper_preset_numbers():
    cfg = config.load(os.path.join(PRESETS, "paper.yaml"))
    assert cfg.train.global_batch == 81920 and cfg.train.label_smoothing == 0.1
    assert cfg.optim.name == "lars" and cfg.model.name == "resnet50_v1.5"
    m = config.load(os.path.join(PRESETS, "mlperf_v06.yaml"))
    assert (m.optim.lr, m.schedule.warmup_epochs, m.schedule.power, m.schedule.end_lr) == (13.0, 36, 2.2, 0.0325)
    assert (m.optim.eta, m.optim.epsilon, m.optim.momentum, m.optim.wd) == (0.0025, 1e-9, 0.96, 5e-5)
    assert m.schedule.wd_schedule == "follow_lr" and m.train.target_accuracy == 0.759


# -- the CLI: one line, exit 2, before any training -----------------------------------
def _one_line_error(proc, words):
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = [l for l in proc.stderr.strip().splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("yasgd: error:"), proc.stderr
    assert words in lines[0], lines[0]
    assert "epoch" not in proc.stdout


def test_cli_unknown_key(tmp_path):
    _one_line_error(run_cli("train", os.path.join(PRESETS, "tiny.yaml"), "train.epohcs=3",
                            f"run.dir={tmp_path}"), "unknown config key train.epohcs")


def test_cli_wrong_type(tmp_path):
    _one_line_error(run_cli("train", os.path.join(PRESETS, "tiny.yaml"), "train.global_batch=big",
                            f"run.dir={tmp_path}"), "train.global_batch must be an integer")


def test_cli_indivisible_batch(tmp_path):
    # as if launched with 3 ranks: checked from the launcher's environment before Horovod starts
    _one_line_error(run_cli("train", os.path.join(PRESETS, "tiny.yaml"), f"run.dir={tmp_path}",
                            env_extra={"OMPI_COMM_WORLD_SIZE": "3"}), "not divisible by ranks (3)")


def test_cli_missing_dataset(tmp_path):
    _one_line_error(run_cli("train", os.path.join(PRESETS, "tiny.yaml"), f"run.dir={tmp_path}",
                            f"data.root={tmp_path}/nowhere"), "dataset directory not found")


def test_cli_missing_config_file(tmp_path):
    _one_line_error(run_cli("train", str(tmp_path / "missing.yaml")), "config file not found")
    assert not os.listdir(tmp_path)
