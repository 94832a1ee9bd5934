"""Keys a config does not read (yasgd.config_text.READ_ONLY_WITH): the premise of each entry
on the code that reads it (changing the key under a config that does not read it changes
nothing the training computes: the optimizer's updates, the network, the loaders' batches),
and the rule as the commands apply it (an override: one line; the file: one line; a file key
an override switched off: one warning line)."""
import dataclasses
import os
import subprocess
import sys

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon

from yasgd import UsageError, config, config_text, model, optim, schedule
from yasgd import data as data_mod
from yasgd.data import im2rec
from yasgd.data.testdata import make_imagenet_folder

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
YASGD = os.path.join(os.path.dirname(sys.executable), "yasgd")
TINY = os.path.join(ROOT, "examples", "configs", "tiny.yaml")
DEMO = os.path.join(ROOT, "examples", "configs", "demo.yaml")
PAPER = os.path.join(ROOT, "examples", "configs", "paper.yaml")

#: a value other than the default for every key of the table
OTHER = {"optim.eta": 0.5, "optim.epsilon": 0.1, "optim.momentum_correction": True,
         "optim.wd_in_denominator": False, "optim.fused": False,
         "schedule.wd_schedule": "follow_lr", "model.width": 32, "model.stem_stride": 2,
         "data.pad_crop": 5, "data.val_resize": 300, "data.min_area": 0.5,
         "data.polish_min_area": 0.5, "data.threads": 1, "data.synthetic_samples": 999,
         "data.root": "/nonexistent", "data.limit": 100, "data.flip": False,
         "data.polish_epochs": 3, "model.bn_momentum": 0.5, "mlperf.division": "closed",
         "mlperf.org": "another org", "mlperf.platform": "a-platform", "mlperf.status": "onprem"}


def _with(cfg, name, value):
    section, key = name.split(".")
    return dataclasses.replace(cfg, **{section: dataclasses.replace(getattr(cfg, section),
                                                                   **{key: value})})


def test_every_key_of_the_table_is_tested_here():
    assert set(OTHER) == set(config_text.READ_ONLY_WITH)
    defaults = config.load(None, [])
    for name, value in OTHER.items():
        section, key = name.split(".")
        assert value != getattr(getattr(defaults, section), key), name


# -- the premise, on the code that reads each key -------------------------------------------
def _updates(cfg):
    """The weights of a small network after 4 steps of ``cfg``'s optimizer and schedules,
    built as yasgd.train builds them (yasgd.schedule.from_config, yasgd.optim.from_config)."""
    mx.random.seed(0)
    net = gluon.nn.Dense(4, in_units=3)
    net.initialize(mx.init.Xavier())
    lr_s, wd_s = schedule.from_config(cfg.optim, cfg.schedule, steps_per_epoch=2, epochs=3)
    trainer = gluon.Trainer(net.collect_params(), optim.from_config(cfg.optim, lr_s, wd_s))
    rng = np.random.RandomState(0)
    x, y = mx.nd.array(rng.randn(8, 3)), mx.nd.array(rng.randn(8, 4))
    for _ in range(4):
        with autograd.record():
            loss = ((net(x) - y) ** 2).mean()
        loss.backward()
        trainer.step(1)
    return [p.data().asnumpy() for p in net.collect_params().values()]


OPTIM_KEYS = [k for k, (d, _, _) in config_text.READ_ONLY_WITH.items() if d == "optim.name"]


@pytest.mark.parametrize("name", OPTIM_KEYS)
def test_sgd_and_nag_do_not_read_larss_keys(name):
    base = config.load(TINY, ["optim.wd=0.05", "schedule.warmup_epochs=1"])
    for opt in ("sgd", "nag"):
        cfg = _with(base, "optim.name", opt)
        for a, b in zip(_updates(cfg), _updates(_with(cfg, name, OTHER[name])), strict=True):
            np.testing.assert_array_equal(a, b, err_msg=f"{name} under {opt}")
    if name != "optim.fused":     # the fused path computes what the per-layer path does
        changed = [np.array_equal(a, b) for a, b in zip(
            _updates(base), _updates(_with(base, name, OTHER[name])), strict=True)]
        assert not all(changed), f"{name} changes nothing under LARS either"


@pytest.mark.parametrize("name", ["model.width", "model.stem_stride"])
def test_the_imagenet_resnets_do_not_read_width_or_stem_stride(name):
    def shapes(cfg):     # of every parameter and every node's output
        net = model.from_config(cfg.model, in_channels=3)
        nodes = net(mx.sym.var("data")).get_internals()
        args, out, aux = nodes.infer_shape(data=(1, 3, 64, 64))
        return args + out + aux
    for arch in ("resnet18", "resnet50"):
        cfg = _with(config.load(TINY, []), "model.name", arch)
        assert shapes(cfg) == shapes(_with(cfg, name, OTHER[name])), (arch, name)
    cfg = config.load(TINY, [])                                    # resnet8 reads them
    assert shapes(cfg) != shapes(_with(cfg, name, OTHER[name]))


def test_the_iteration_rule_does_not_read_bn_momentum(tmp_path):
    from yasgd import dist, train

    def momenta(cfg):     # of every BN layer of the network yasgd.train.build makes
        return [bn._kwargs["momentum"] for bn in _bn_layers(train.build(cfg, dist.world()).net)]
    base = config.load(TINY, [f"run.dir={tmp_path}", "model.bn_momentum_rule=iterations"])
    assert len(momenta(base)) == 9   # resnet8: the stem, 2 a block, 2 shortcuts (stages 2, 3)
    assert momenta(base) == momenta(_with(base, "model.bn_momentum", 0.5))
    fixed = _with(base, "model.bn_momentum_rule", "fixed")
    assert set(momenta(_with(fixed, "model.bn_momentum", 0.5))) == {0.5}
    assert 0.5 not in momenta(base)


def _bn_layers(block):
    for child in block._children.values():
        if "BatchNorm" in type(child).__name__:      # gluon's BatchNorm (or BatchNormReLU)
            yield child
        yield from _bn_layers(child)


def test_a_run_without_its_mlperf_log_does_not_read_the_logs_fields(tmp_path):
    from yasgd import dist, mlperf, train
    keys = [k for k, (d, _, _) in config_text.READ_ONLY_WITH.items() if d == "mlperf.enabled"]
    assert len(keys) == 4

    def header(*over):      # what the run's mlperf.log holds once its header is written
        # a run.dir of its own per call: two runs started in one second share a directory
        cfg = config.load(TINY, [f"run.dir={tmp_path / str(len(os.listdir(tmp_path)))}",
                                 *over, *(f"{k}={OTHER[k]}" for k in keys)])
        s = train.build(cfg, dist.world())
        log = mlperf.MLPerfLog.for_run(s, lambda epoch: False)
        path = os.path.join(s.run_dir, "mlperf.log")
        if log.ml is not None:
            log._handler.flush()
        return open(path).read() if os.path.exists(path) else None
    on = header()          # the fields are the header's, as set
    for k in keys:
        assert f'"value": "{OTHER[k]}"' in on, k
    assert header("mlperf.enabled=false") is None      # no log: nothing reads them


@pytest.fixture(scope="module")
def recordio_root(tmp_path_factory):
    base = tmp_path_factory.mktemp("reads")
    src = make_imagenet_folder(str(base / "src"), 4, 2, sizes=(40, 56), num_classes=2)
    im2rec.convert(src, str(base / "rec"), resize=48, quality=90, workers=1, progress=False)
    return str(base / "rec")


def _batches(cfg):
    """Two epochs of the first rank's training batches (the second with the final
    polishing on) and its first validation batch, as arrays."""
    train, val = data_mod.build_loaders(cfg, rank=0, size=1, batch_size=8, ctx=mx.cpu())
    out = []
    for epoch, polish in ((0, False), (1, True)):
        train.set_epoch(epoch, polish=polish)
        out += [a.asnumpy() for batch in list(train)[:2] for a in batch]
    return out + [a.asnumpy() for a in next(iter(val))]


@pytest.mark.parametrize("kind", ["fashion_mnist", "recordio", "synthetic"])
def test_each_data_kind_does_not_read_the_others_keys(kind, recordio_root):
    over = {"fashion_mnist": ["data.limit=64", "data.eval_limit=16"],
            "recordio": ["data.kind=recordio", f"data.root={recordio_root}", "data.eval_limit=0",
                         "data.image_size=32", "data.val_resize=40", "model.classes=2",
                         "data.threads=1"],
            "synthetic": ["data.kind=synthetic", "data.image_size=16", "data.eval_limit=0",
                          "data.synthetic_samples=32"]}[kind]
    cfg = config.load(TINY, over + ["data.polish_epochs=1"])
    unread = [k for k, (d, reads, _) in config_text.READ_ONLY_WITH.items()
              if d == "data.kind" and not reads(kind)]
    assert unread
    ref = _batches(cfg)
    for name in unread:
        other = _batches(_with(cfg, name, OTHER[name]))
        assert len(other) == len(ref), name
        for a, b in zip(ref, other):
            np.testing.assert_array_equal(a, b, err_msg=name)
    if kind == "synthetic":      # and never augmented: the final polishing changes nothing
        train, _ = data_mod.build_loaders(cfg, rank=0, size=1, batch_size=8, ctx=mx.cpu())
        train.set_epoch(0, polish=False)
        plain = [a.asnumpy() for batch in train for a in batch]
        train.set_epoch(0, polish=True)
        assert all(np.array_equal(a, b) for a, b in zip(
            plain, [a.asnumpy() for batch in train for a in batch], strict=True))


def test_the_data_keys_a_kind_reads_change_its_batches(recordio_root):
    # the other side of the table, on two keys per loader: what it reads, it uses
    fm = config.load(TINY, ["data.limit=64", "data.eval_limit=16", "data.pad_crop=4"])
    assert not all(np.array_equal(a, b) for a, b in zip(
        _batches(fm), _batches(_with(fm, "data.flip", False))))
    rec = config.load(TINY, ["data.kind=recordio", f"data.root={recordio_root}",
                             "data.eval_limit=0", "data.image_size=32", "data.val_resize=40",
                             "model.classes=2", "data.threads=1"])
    assert not all(np.array_equal(a, b) for a, b in zip(
        _batches(rec), _batches(_with(rec, "data.val_resize", 64))))


# -- the rule --------------------------------------------------------------------------------
def test_the_rule_on_overrides_and_files(tmp_path):
    cfg = config.load(TINY, ["optim.name=sgd"])
    with pytest.raises(UsageError, match="^override 'optim.eta=0.5': optim.name=sgd does not "
                                         "read optim.eta \\(it is read with optim.name=lars "
                                         "only\\); drop the override, or change optim.name$"):
        config_text.check_read(_with(cfg, "optim.eta", 0.5), ["optim.name=sgd",
                                                               "optim.eta=0.5"])
    # the default value is no request: accepted (so is a key its config reads)
    assert config_text.check_read(cfg, ["optim.name=sgd", "optim.eta=0.001"]) == []
    assert config_text.check_read(config.load(TINY, ["optim.eta=0.5"]), ["optim.eta=0.5"]) == []
    # a flag's value as a config writes it (false, not Python's False)
    with pytest.raises(UsageError, match="^override 'mlperf.org=x': mlperf.enabled=false does "
                                         "not read mlperf.org \\(it is read with "
                                         "mlperf.enabled=true only: they are fields of "
                                         "mlperf.log's header\\); drop the override, or "
                                         "change mlperf.enabled$"):
        config_text.check_read(config.load(TINY, ["mlperf.enabled=false", "mlperf.org=x"]),
                               ["mlperf.enabled=false", "mlperf.org=x"])
    own = tmp_path / "sgd.yaml"
    own.write_text("optim: {name: sgd}\nschedule: {wd_schedule: follow_lr}\n")
    with pytest.raises(UsageError, match=f"^config file {own} sets schedule.wd_schedule="
                                         f"follow_lr, which optim.name=sgd does not read "
                                         f"\\(it is read with optim.name=lars only: MXNet's "
                                         f"SGD and NAG keep optim.wd constant\\); remove it "
                                         f"from the file, or change optim.name$"):
        config_text.check_read(config.load(str(own), []), [], str(own))
    switched = config.load(PAPER, ["data.kind=synthetic", "optim.name=sgd"])
    assert config_text.check_read(switched, ["data.kind=synthetic", "optim.name=sgd"],
                                  PAPER) == [
        f"the override 'data.kind=synthetic' leaves unread what config file {PAPER} sets: "
        "data.root=data/imagenet-rec, data.polish_epochs=5, data.threads=8",
        f"the override 'optim.name=sgd' leaves unread what config file {PAPER} sets: "
        "optim.eta=0.0025, optim.epsilon=1e-09, schedule.wd_schedule=follow_lr"]


def _cli(*args, env=None, cwd=ROOT):
    p = subprocess.run([YASGD, *args], capture_output=True, text=True, cwd=cwd, timeout=120,
                       env=env)
    return p.returncode, p.stdout, p.stderr


@pytest.mark.parametrize("head", [["train", DEMO], ["check-config", DEMO],
                                  ["jobs", "render", "--scheduler", "pbs", "--nodes", "1",
                                   "--config", DEMO],
                                  ["launch", "-np", "2", "--", YASGD, "train", DEMO]],
                         ids=["train", "check-config", "jobs render", "launch"])
def test_the_commands_refuse_an_unread_override_in_one_line(tmp_path, head):
    rc, out, err = _cli(*head, f"run.dir={tmp_path}/runs", "data.kind=synthetic",
                        "data.pad_crop=4")
    assert (rc, out) == (2, "") and err == (
        "yasgd: error: override 'data.pad_crop=4': data.kind=synthetic does not read "
        "data.pad_crop (it is read with data.kind=fashion_mnist only); drop the override, or "
        "change data.kind\n")
    assert os.listdir(tmp_path) == []


def test_a_preset_switched_by_an_override_warns_once(tmp_path):
    rc, out, err = _cli("check-config", PAPER, "optim.name=sgd", "--world-size", "2048",
                        "--device", "gpu")
    assert rc == 0 and err == (
        f"yasgd: warning: the override 'optim.name=sgd' leaves unread what config file {PAPER} "
        "sets: optim.eta=0.0025, optim.epsilon=1e-09, schedule.wd_schedule=follow_lr\n")
    env = dict(os.environ, OMPI_COMM_WORLD_RANK="1")        # not the first rank: silent
    rc, out, err = _cli("check-config", PAPER, "optim.name=sgd", "--world-size", "2048",
                        "--device", "gpu", env=env)
    assert (rc, err) == (0, "")
    assert _cli("check-config", DEMO)[2] == ""     # the presets as they are: nothing to say
    # a config refused by a later check: its one error line, not the warning too
    over = ["data.kind=synthetic", "data.image_size=725", f"run.dir={tmp_path}/runs"]
    for head in (["check-config", DEMO], ["train", DEMO]):
        rc, out, err = _cli(*head, *over)
        assert rc == 2 and err.count("\n") == 1, err
        assert err.startswith("yasgd: error: config key data.image_size=725: "), err
    assert os.listdir(tmp_path) == []


def test_a_jobs_default_walltime_counts_the_epoch_the_loader_makes():
    # synthetic data reads no data.limit: its epoch is data.synthetic_samples (a file key left
    # unread by an override that switched the data must not shorten the job's walltime)
    from yasgd import jobs
    cfg = config.load(None, ["data.kind=synthetic", "data.synthetic_samples=4096000",
                             "data.limit=1000", "data.eval_limit=0", "train.global_batch=4096",
                             "train.epochs=90", "schedule.warmup_epochs=1"])
    steps = 90 * 4096000 // 4096
    seconds = 2 * steps * 4096 / (jobs.WALLTIME_IMG_PER_GPU_S * 8) + jobs.WALLTIME_STARTUP_S
    assert jobs.default_walltime(cfg, 8) == max(jobs.WALLTIME_FLOOR_S,
                                                -(-int(seconds) // 300) * 300) == 231000
    fmnist = config.load(None, ["data.limit=1000", "train.global_batch=100", "train.epochs=2",
                                "schedule.warmup_epochs=1"])     # Fashion-MNIST reads it
    assert jobs.default_walltime(fmnist, 8) == jobs.WALLTIME_FLOOR_S
