"""Config: file + overrides, validation before any work, one-line errors with exit 2."""
import os
import subprocess
import sys

import pytest
import yaml

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
    (["optim.lr=fast"], "optim.lr must be a number"),
    (["optim.fused=maybe"], "optim.fused must be a boolean"),
    (["optim.name=adam"], "optim.name must be one of"),
    (["schedule.warmup_epochs=100"], "warmup_epochs"),
])
def test_bad_values_raise(override, words):
    with pytest.raises(UsageError, match=words):
        config.load(None, override)


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


@pytest.mark.parametrize("name", sorted(f for f in os.listdir(PRESETS) if f.endswith(".yaml")))
def test_presets_load_and_validate(name):
    cfg = config.load(os.path.join(PRESETS, name))
    raw = yaml.safe_load(open(os.path.join(PRESETS, name)))
    assert raw, name
    # every preset must split its global batch over the world size it documents
    world = raw.get("_world_size", None)
    config.per_rank_batch(cfg, world or 1)


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
