"""Bad input, through the real CLI: one line ``yasgd: error: ...`` naming the key, file or
argument, exit status 2, no traceback, nothing done.

The config cases are generated from the schema (``yasgd.config``: every field declares its
check), so a key added without one fails ``test_every_key_declares_a_check``, and a new kind
of check without bad values fails ``bad_values``. The schema-derived cases run in-process
(``yasgd.cli.main``); a representative subset and every hand-written case run the installed
``yasgd`` in a subprocess.
"""
import dataclasses
import json
import os
import subprocess
import sys
from typing import get_type_hints

import pytest
from yasgd import UsageError, cli, config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
YASGD = os.path.join(os.path.dirname(sys.executable), "yasgd")
IS_ROOT = os.geteuid() == 0       # root ignores permission bits


# -- values that must be refused, from each key's declared check --------------------------
WRONG_TYPE = {int: "abc", float: "abc", bool: "maybe", str: "[1, 2]"}


def bad_values(check: config.Check, typ: type):
    """(label, override right-hand side) pairs, each of which the key must refuse."""
    out = [("wrong type", WRONG_TYPE[typ])]
    if typ is int:
        out.append(("not whole", "1.5"))
    if isinstance(check, config.Int):
        out.append(("beyond 64 bits", str(2 ** 63)))
        if check.lo is not None:
            out.append(("below", str(check.lo - 1)))
        if check.hi is not None:
            out.append(("above", str(check.hi + 1)))
    elif isinstance(check, config.Float):
        out += [("nan", ".nan"), ("inf", ".inf"), ("-inf", "-.inf"), ("text nan", "nan"),
                ("overflow", "1" + "0" * 400)]
        if check.ge is not None:
            out.append(("below", repr(check.ge - 0.5)))
        if check.gt is not None:
            out.append(("at open bound", repr(check.gt)))
        if check.le is not None:
            out.append(("above", repr(check.le + 0.5)))
        if check.lt is not None:
            out.append(("at open bound", repr(check.lt)))
    elif isinstance(check, config.Bool):
        out.append(("an integer", "2"))
    elif isinstance(check, config.OneOf):
        out += [("not a choice", "not-a-choice"), ("empty", "")]
    elif isinstance(check, config.Line):
        out += [("newline", '"a\\nb"'), ("NUL", '"a\\0b"'), ("carriage return", '"a\\rb"')]
        if check.nonempty:
            out.append(("empty", ""))
    elif isinstance(check, config.Name):
        out += [("traversal", "../../../etc/x"), ("separator", "a/b"), ("dot", "."),
                ("dot dot", ".."), ("empty", ""), ("leading space", '" a"'), ("tab", '"a\\tb"'),
                ("newline", '"a\\nb"'), ("colon", '"a:b"'), ("backslash", '"a\\\\b"'),
                ("too long", "x" * (check.max_len + 1))]
    elif isinstance(check, config.ModelName):
        out += [("unknown depth", "resnet7"), ("unknown family", "vgg16"), ("no depth", "resnet")]
    elif isinstance(check, config.Seconds):
        out += [("negative", "-1"), ("words", "soon"), ("nan", ".nan"), ("inf", "inf")]
    elif isinstance(check, config.LossScale):
        out += [("below one", "0.5"), ("negative", "-8"), ("words", "auto"), ("nan", ".nan"),
                ("inf", "inf"), ("empty", "")]
    else:
        pytest.fail(f"no bad values for the check {check!r}: add them to bad_values")
    return out


def all_keys():
    for section in dataclasses.fields(config.Config):
        cls = section.default_factory
        hints = get_type_hints(cls)
        for f in dataclasses.fields(cls):
            yield section.name, f.name, f.metadata.get("check"), hints[f.name]


SCHEMA_CASES = [pytest.param(s, k, rhs, id=f"{s}.{k}-{label}")
                for s, k, check, typ in all_keys() if check is not None
                for label, rhs in bad_values(check, typ)]


def test_every_key_declares_a_check():
    keys = list(all_keys())
    assert len(keys) >= 68
    missing = [f"{s}.{k}" for s, k, check, _ in keys if not isinstance(check, config.Check)]
    assert not missing, f"config keys without a declared check: {missing}"
    for s, k, check, typ in keys:
        assert check.typ is typ, f"{s}.{k}: check for {check.typ}, field is {typ}"
        assert check.ok(getattr(getattr(config.Config(), s), k)), f"default of {s}.{k} refused"
        assert check.describe()
    assert {f"{s}.{k}" for s, k, _, _ in keys} >= {"run.stall_timeout_s"}
    config.check_values(config.Config())


@pytest.fixture(scope="module")
def empty_yaml(tmp_path_factory):
    path = tmp_path_factory.mktemp("cfg") / "empty.yaml"
    path.write_text("")
    return str(path)


def one_error(rc, out, err, words):
    assert rc == 2, (rc, out, err)
    assert "Traceback" not in err and "Traceback" not in out, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("yasgd: error:"), lines[0]
    assert words in lines[0], (words, lines[0])
    return lines[0]


def run_main(capsys, argv):
    rc = cli.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("section, key, rhs", SCHEMA_CASES)
def test_schema_bad_value(capsys, empty_yaml, section, key, rhs):
    rc, out, err = run_main(capsys, ["check-config", empty_yaml, f"{section}.{key}={rhs}"])
    line = one_error(rc, out, err, f"config key {section}.{key} must be ")
    assert "got " in line
    assert out == ""                             # refused before anything is printed


@pytest.mark.parametrize("section, key, rhs", SCHEMA_CASES)
def test_schema_bad_value_in_a_file(tmp_path, section, key, rhs):
    # the same values written in a config file: refused, naming the key and the file
    path = tmp_path / "c.yaml"
    path.write_text(f"{section}:\n  {key}: {rhs if rhs != '' else repr('')}\n")
    with pytest.raises(UsageError) as e:
        config.load(str(path))
    assert f"config key {section}.{key} must be " in str(e.value) and str(path) in str(e.value)


def test_boundaries_are_accepted():
    # the closed ends of every range are allowed (schedule.warmup_epochs=0: train.epochs may be 1)
    for s, k, check, _ in all_keys():
        good = []
        if isinstance(check, config.Int):
            good = [v for v in (check.lo, check.hi) if v is not None]
        elif isinstance(check, config.Float):
            good = [v for v in (check.ge, check.le) if v is not None]
        for v in good:
            cfg = config.load(None, ["schedule.warmup_epochs=0", f"{s}.{k}={v}"])
            assert getattr(getattr(cfg, s), k) == v


def test_check_values_covers_configs_built_in_code():
    cfg = config.Config()
    cfg.optim.lr = float("nan")
    with pytest.raises(UsageError, match="config key optim.lr must be a finite number > 0, got nan"):
        config.check_values(cfg)


def test_model_names_match_yasgd_model():
    from yasgd import model   # imports MXNet: the config layer itself does not
    assert config.BOTTLENECK_DEPTHS == tuple(model.BOTTLENECK_LAYERS)
    assert config.BASIC_DEPTHS == tuple(model.BASIC_LAYERS)
    for name in ("resnet18", "resnet34", "resnet50", "ResNet50_v1.5", "resnet101_v1b",
                 "resnet152", "resnet8", "resnet20", "resnet56", "resnet110"):
        assert config.model_depth(name) is not None
        assert model.imagenet_style(name) == (config.model_depth(name) in
                                              config.BOTTLENECK_DEPTHS + config.BASIC_DEPTHS)
    model.build("resnet8", classes=10)
    for name in ("resnet7", "resnet9", "resnet", "vgg16", "resnet50x", "", "resnet2"):
        assert config.model_depth(name) is None
        with pytest.raises(UsageError):
            model.build(name)


# -- through the installed ``yasgd``: files, hand-written values, every CLI argument -------
def run_cli(*args):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([YASGD, *args], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=60)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    f = {"dir": str(d), "empty": d / "empty.yaml", "binary": d / "binary.yaml",
         "latin1": d / "latin1.yaml", "zero": d / "zero.yaml", "false": d / "false.yaml",
         "list": d / "list.yaml", "string": d / "string.yaml", "dup": d / "dup.yaml",
         "dup_top": d / "dup_top.yaml", "section": d / "section.yaml", "broken": d / "broken.yaml",
         "nan_in_file": d / "nan.yaml", "plain": d / "plain.txt", "locked": d / "locked.yaml"}
    f["empty"].write_text("")
    f["binary"].write_bytes(b"PK\x03\x04\x00\x00\x08\x00\xff\xfe binary\x00")
    f["latin1"].write_bytes("train: {epochs: 3}\nrun: {name: caf\xe9}\n".encode("latin-1"))
    f["zero"].write_text("0\n")
    f["false"].write_text("false\n")
    f["list"].write_text("[]\n")
    f["string"].write_text("just some text\n")
    f["dup"].write_text("train:\n  epochs: 3\n  global_batch: 64\n  epochs: 4\n")
    f["dup_top"].write_text("train: {epochs: 3}\noptim: {lr: 0.1}\ntrain: {epochs: 4}\n")
    f["section"].write_text("train: 5\n")
    f["broken"].write_text("train: [epochs: 3\n")
    f["nan_in_file"].write_text("optim:\n  lr: .nan\n")
    f["plain"].write_text("not a directory\n")
    f["locked"].write_text("train: {epochs: 3}\n")
    f["locked"].chmod(0)
    os.makedirs(os.path.join(str(d), "simout"))
    f["fifo"] = d / "fifo.yaml"
    os.mkfifo(f["fifo"])
    f["huge"] = d / "huge.yaml"
    f["huge"].write_text("#" * 2_000_000)
    yield {k: str(v) for k, v in f.items()}
    f["locked"].chmod(0o600)


CHECK = "check-config"

# (argv with {placeholders} from ``files``, words the one line must hold)
CLI_CASES = [
    # config files
    ([CHECK, "{binary}"], "config file {binary} is binary"),
    ([CHECK, "{latin1}"], "config file {latin1} is not UTF-8"),
    ([CHECK, "{zero}"], "config file {zero} must hold a mapping"),
    ([CHECK, "{false}"], "config file {false} must hold a mapping"),
    ([CHECK, "{list}"], "config file {list} must hold a mapping"),
    ([CHECK, "{string}"], "config file {string} must hold a mapping"),
    ([CHECK, "{dup}"], "duplicate key train.epochs"),
    ([CHECK, "{dup_top}"], "duplicate key train"),
    ([CHECK, "{section}"], "config section 'train' in {section} must be a mapping"),
    ([CHECK, "{broken}"], "config file {broken} is not valid YAML"),
    ([CHECK, "{nan_in_file}"], "config key optim.lr must be a finite number > 0, got nan (in {nan_in_file})"),
    ([CHECK, "{dir}"], "config file {dir} is a directory"),
    ([CHECK, "{dir}/missing.yaml"], "config file not found: {dir}/missing.yaml"),
    # values
    ([CHECK, "{empty}", "optim.lr=.nan"], "config key optim.lr must be a finite number > 0, got nan"),
    ([CHECK, "{empty}", "model.width=0"], "config key model.width must be an integer >= 1, got 0"),
    ([CHECK, "{empty}", "model.classes=0"], "config key model.classes must be an integer >= 1"),
    ([CHECK, "{empty}", "data.limit=-5"], "config key data.limit must be an integer >= 0, got -5"),
    ([CHECK, "{empty}", "train.target_accuracy=5"], "config key train.target_accuracy must be a finite number in [0, 1]"),
    ([CHECK, "{empty}", "optim.wd=-0.0001"], "config key optim.wd must be a finite number >= 0"),
    ([CHECK, "{empty}", "optim.epsilon=-1e-9"], "config key optim.epsilon must be a finite number >= 0"),
    ([CHECK, "{empty}", "schedule.end_lr=-0.1"], "config key schedule.end_lr must be a finite number >= 0"),
    ([CHECK, "{empty}", "schedule.warmup_epochs=.nan"], "config key schedule.warmup_epochs must be a finite number >= 0, got nan"),
    ([CHECK, "{empty}", "run.name=../../../etc/x"], "config key run.name must be a name"),
    ([CHECK, "{empty}", "run.seed=4294967296"], "config key run.seed must be an integer in [0, 4294967295]"),
    ([CHECK, "{empty}", "run.stall_timeout_s=-1"], "config key run.stall_timeout_s must be auto or"),
    ([CHECK, "{empty}", "model.name=resnet7"], "config key model.name must be a known model"),
    ([CHECK, "{empty}", 'mlperf.org="a\\nb"'], "config key mlperf.org must be"),
    ([CHECK, "{empty}", "optim.lr=0.1", "schedule.end_lr=0.5"], "schedule.end_lr (0.5) exceeds optim.lr"),
    ([CHECK, "{empty}", "train.epochs=2"], "schedule.warmup_epochs must be in [0, train.epochs=2]"),
    ([CHECK, "{empty}", "bogus.x=1"], "unknown config section 'bogus'"),
    ([CHECK, "{empty}", "train.epohcs=3"], "unknown config key train.epohcs"),
    ([CHECK, "{empty}", "noequals"], "override 'noequals' is not of the form section.key=value"),
    # the rules of the device the ranks compute on
    ([CHECK, "{empty}", "model.dtype=float16", "--device", "cpu"],
     "config key model.dtype=float16 needs GPUs: MXNet has no float16 training kernels on the CPU"),
    ([CHECK, "{empty}", "model.fused_bn_relu=true", "--device", "gpu"],
     "config key model.fused_bn_relu=true needs MXNet's BatchNormWithReLU"),
    # a job's ranks compute on GPUs: its script is refused where they cannot run it
    (["jobs", "render", "--scheduler", "pbs", "--nodes", "1", "--config", "{empty}",
      "model.fused_bn_relu=true"], "config key model.fused_bn_relu=true needs MXNet's "
                                   "BatchNormWithReLU, which MXNet 1.9.1 has only on the CPU"),
    # check-config arguments
    ([CHECK, "{empty}", "--world-size", "0"], "check-config: argument --world-size: must be an integer >= 1, got '0'"),
    ([CHECK, "{empty}", "--world-size", "-2"], "argument --world-size: must be an integer >= 1, got '-2'"),
    ([CHECK, "{empty}", "--world-size", "two"], "argument --world-size"),
    ([CHECK, "{empty}", "--world-size", "1.5"], "argument --world-size"),
    ([CHECK, "{empty}", "--world-size", "3"], "not divisible by ranks (3)"),
    ([CHECK], "check-config: the following arguments are required: config"),
    ([CHECK, "{empty}", "--frob"], "unrecognized arguments: --frob"),
    # the top level
    ([], "the following arguments are required: command"),
    (["frobnicate"], "argument command: invalid choice: 'frobnicate'"),
    (["--frob", CHECK, "{empty}"], "unrecognized arguments: --frob"),
    # simulate
    (["simulate", "--epochs", "nan"], "simulate: argument --epochs: must be a finite number of epochs > 0, got 'nan'"),
    (["simulate", "--epochs", "inf"], "argument --epochs"),
    (["simulate", "--epochs", "0"], "argument --epochs"),
    (["simulate", "--epochs", "-90"], "argument --epochs"),
    (["simulate", "--gpus", "0"], "argument --gpus: must be an integer >= 1"),
    (["simulate", "--gpus", "nan"], "argument --gpus"),
    (["simulate", "--gpus", "-8"], "argument --gpus"),
    (["simulate", "--batch", "0"], "argument --batch"),
    (["simulate", "--batch", "1e400"], "argument --batch"),
    (["simulate", "--gpus", "3", "--batch", "100"], "--batch 100 is not divisible by --gpus 3"),
    (["simulate", "--images-per-gpu-s", "nan"], "argument --images-per-gpu-s"),
    (["simulate", "--images-per-gpu-s", "-1"], "argument --images-per-gpu-s"),
    (["simulate", "--budget-bytes", "0"], "argument --budget-bytes"),
    (["simulate", "--budget-bytes", "inf"], "argument --budget-bytes"),
    (["simulate", "--preset", "nope"], "argument --preset: must be one of abci2019"),
    # each in range, yet no finite prediction: named, never printed as inf / nan
    (["simulate", "--images-per-gpu-s", "1e-300"], "--images-per-gpu-s 1e-300 gives no finite "),
    # no schedule anyone plans: refused rather than printed as a 300-digit time
    (["simulate", "--epochs", "1e308"], "--epochs must be in (0, 10000], got 1e+308"),
    (["simulate", "--epochs", "10000.5"], "--epochs must be in (0, 10000], got 10000.5"),
    # a step of more images than the training set has is no epoch the model can time
    (["simulate", "--gpus", "1", "--batch", "1281168"],
     "--batch 1281168 is more than the 1,281,167 images of ImageNet-1k's training set"),
    (["simulate", "--plot", "{dir}/missing/x.png"], "--plot {dir}/missing/x.png: directory {dir}/missing does not exist"),
    (["simulate", "--plot", "{dir}/missing/"], "--plot {dir}/missing/"),
    # matplotlib picks the format from the name: another suffix, or none, is no PNG
    (["simulate", "--plot", "{dir}/fig.txt"], "--plot {dir}/fig.txt: --plot writes a PNG file; "
                                              "name one ending in .png, or a directory"),
    (["simulate", "--plot", "{dir}/fig"], "--plot {dir}/fig: --plot writes a PNG file"),
    (["simulate", "--plot", "{dir}/fig.svg"], "--plot {dir}/fig.svg: --plot writes a PNG file"),
    (["simulate", "--json", "{dir}/missing/x.json"], "--json {dir}/missing/x.json"),
    (["simulate", "--json", "{plain}/x.json"], "--json {plain}/x.json"),
    # preflight: a timer past a year is refused (threading cannot wait that long)
    (["preflight", "--timeout", "1e300"], "preflight: argument --timeout: must be a finite "
                                          "number of seconds in (0, 31536000]"),
    # a config that is not a regular file is refused before it is read (a FIFO would wait
    # for a writer for good, /dev/zero never ends), and so is one too large to be a config
    ([CHECK, "{fifo}"], "config file {fifo} is not a regular file (a FIFO, device or socket)"),
    (["train", "{fifo}"], "config file {fifo} is not a regular file"),
    (["jobs", "render", "--scheduler", "pbs", "--nodes", "1", "--config", "{fifo}"],
     "config file {fifo} is not a regular file"),
    ([CHECK, "/dev/zero"], "config file /dev/zero is not a regular file"),
    ([CHECK, "{huge}"], "config file {huge} is 2,000,000 bytes, more than any config"),
    # bench, provenance
    (["bench", "nope"], "bench: argument name: invalid choice: 'nope'"),
    (["bench", "optimizer", "--out", "{plain}"], "bench --out {plain} must be a writable directory"),
    (["bench", "optimizer", "--out", "{plain}/sub"], "bench --out {plain}/sub"),
    (["provenance", "{plain}"], "provenance RUN_DIR {plain} must be a writable directory"),
    (["provenance", "{plain}/run"], "provenance RUN_DIR {plain}/run"),
    (["provenance", "{dir}", "--hostfile", "{dir}"], "provenance --hostfile {dir} is not a file"),
    (["provenance", "{dir}", "--hostfile", "{dir}/nohosts"], "--hostfile {dir}/nohosts does not exist"),
    (["provenance", "{dir}", "--hostfile", "{binary}"], "--hostfile {binary} is not a text file of host names"),
    (["provenance", "{dir}", "--hostfile", "{empty}"], "--hostfile {empty} lists no host"),
    (["provenance"], "provenance: the following arguments are required: run_dir"),
    # train: refused before MXNet and Horovod start
    (["train", "{empty}", "run.dir={plain}"], "run directory {plain} is not writable"),
    (["train", "{empty}", "run.dir={plain}/runs"], "(config key run.dir)"),
    # a file system that takes no new entry, whatever the permission bits say
    (["train", "{empty}", "run.dir=/proc/yasgd-none"],
     "run directory /proc/yasgd-none is not writable: /proc is not writable"),
    (["train", "{empty}", "optim.lr=-1"], "config key optim.lr must be a finite number > 0, got -1"),
]
if not IS_ROOT:
    CLI_CASES += [
        ([CHECK, "{locked}"], "config file {locked} cannot be read"),
    ]


@pytest.mark.parametrize("argv, words", CLI_CASES, ids=[" ".join(a)[:60] for a, _ in CLI_CASES])
def test_cli_refuses(files, argv, words):
    argv = [a.format(**files) for a in argv]
    rc, out, err = run_cli(*argv)
    one_error(rc, out, err, words.format(**files))
    assert "usage:" not in err


# a representative subset of the schema-derived cases through the installed command: the first
# case of each (kind of check, kind of bad value)
def _subset():
    seen, picked = set(), []
    for p in SCHEMA_CASES:
        section, key, _ = p.values
        kind = (type(config.schema()[section][key]).__name__, p.id.split("-", 1)[1])
        if kind not in seen:
            seen.add(kind)
            picked.append(p)
    return picked


SUBSET = _subset()


@pytest.mark.parametrize("section, key, rhs", SUBSET)
def test_schema_bad_value_subprocess(files, section, key, rhs):
    rc, out, err = run_cli(CHECK, files["empty"], f"{section}.{key}={rhs}")
    one_error(rc, out, err, f"config key {section}.{key} must be ")


def test_subset_is_representative():
    assert len(SUBSET) >= 20


def test_unwritable_run_dir(tmp_path):
    if IS_ROOT:
        pytest.skip("root ignores permission bits")
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    rc, out, err = run_cli("train", os.path.join(ROOT, "examples", "configs", "tiny.yaml"),
                           f"run.dir={ro}/runs")
    one_error(rc, out, err, f"run directory {ro}/runs is not writable")


def test_config_checks_need_no_mxnet(files):
    # check-config, and train refusing its config, never import MXNet or Horovod
    code = ("import sys; from yasgd import cli; "
            "assert cli.main(['check-config', sys.argv[1]]) == 0; "
            "assert cli.main(['train', sys.argv[2], 'optim.lr=-1']) == 2; "
            "assert not {'mxnet', 'horovod'} & set(sys.modules), sorted(sys.modules)")
    tiny = os.path.join(ROOT, "examples", "configs", "tiny.yaml")
    proc = subprocess.run([sys.executable, "-c", code, tiny, files["empty"]], capture_output=True,
                          text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_help_still_works():
    rc, out, err = run_cli(CHECK, "--help")
    assert rc == 0 and "--world-size" in out and err == ""


def test_simulate_plot_name_chooses_no_other_format(files):
    d = os.path.join(files["dir"], "plotname")
    os.makedirs(d)
    rc, out, err = run_cli("simulate", "--gpus", "8", "--batch", "256", "--json",
                           os.path.join(d, "p.json"), "--plot", os.path.join(d, "p.pdf"))
    one_error(rc, out, err, "--plot writes a PNG file")
    assert os.listdir(d) == []      # refused before the JSON too
    rc, out, err = run_cli("simulate", "--gpus", "8", "--batch", "256", "--json",
                           os.path.join(d, "p.txt"), "--plot", os.path.join(d, "P.PNG"))
    assert rc == 0, err
    with open(os.path.join(d, "P.PNG"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    with open(os.path.join(d, "p.txt")) as f:
        assert json.load(f)["prediction"]["gpus"] == 8


def test_simulate_writes_into_a_directory(files):
    d = os.path.join(files["dir"], "simout")
    rc, out, err = run_cli("simulate", "--gpus", "8", "--batch", "256", "--plot", d, "--json", d)
    assert rc == 0, err
    assert os.path.isfile(os.path.join(d, "simulate.png"))
    assert os.path.isfile(os.path.join(d, "simulate.json"))
    assert f"json: {os.path.join(d, 'simulate.json')}" in out
