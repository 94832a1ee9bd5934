"""Plain YAML values that YAML 1.1 (PyYAML) reads as another value than the one typed
(yasgd.config_text.check_plain_values): refused in one line, in a file and in an override;
every other spelling of a number is the number it says, and quoted text stays text."""
import os
import re
import subprocess
import sys
from typing import get_type_hints

import pytest

from yasgd import UsageError, config, config_text

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
YASGD = os.path.join(os.path.dirname(sys.executable), "yasgd")
TINY = os.path.join(ROOT, "examples", "configs", "tiny.yaml")


def _load(*overrides, text=None, tmp_path=None):
    path = TINY
    if text is not None:
        path = str(tmp_path / "c.yaml")
        with open(path, "w") as f:
            f.write(text)
    return config_text.load(path, list(overrides)), path


@pytest.mark.parametrize("rhs, read", [("010", 8), ("0_10", 8), ("0100", 64)])
def test_a_leading_zero_is_octal_to_yaml_1_1(rhs, read, tmp_path):
    meant = int(rhs.replace("_", ""), 10)
    with pytest.raises(UsageError, match=f"^override 'train.max_steps={rhs}': YAML 1.1 reads "
                                         f"{rhs} as the octal number {read}, not {meant}; "
                                         f"write the number as meant, without the leading "
                                         f"zero$"):
        _load(f"train.max_steps={rhs}")
    with pytest.raises(UsageError, match=f"^config key train.max_steps={rhs} in .*c.yaml "
                                         f"\\(line 2\\): YAML 1.1 reads {rhs} as the octal"):
        _load(text=f"schedule: {{warmup_epochs: 0}}\ntrain: {{max_steps: {rhs}}}\n",
              tmp_path=tmp_path)
    # the rule reads the text, whatever the loader then allows: a sign stays in front
    with pytest.raises(UsageError, match="reads -010 as the octal number -8, not -10;"):
        config_text.check_plain_values(None, ["train.max_steps=-010"])


@pytest.mark.parametrize("name, rhs, read", [("train.max_steps", "1:30", "90"),
                                             ("optim.lr", "1:30.5", "90.5")])
def test_a_colon_is_base_60_to_yaml_1_1(name, rhs, read):
    with pytest.raises(UsageError, match=f"^override '{name}={rhs}': YAML 1.1 reads {rhs} as "
                                         f"the base-60 number {read}; write the number as "
                                         f"meant$"):
        _load(f"{name}={rhs}")


@pytest.mark.parametrize("name, rhs, value", [
    ("train.max_steps", "1_0", 10), ("train.max_steps", "0x10", 16),
    ("train.max_steps", "+5", 5), ("train.max_steps", "07", 7), ("train.max_steps", "0", 0),
    ("optim.lr", "010.5", 10.5), ("optim.lr", "1.50", 1.5), ("optim.lr", "1e1", 10.0),
    ("optim.lr", "0b101", 5.0)])
def test_other_spellings_of_a_number_are_the_number_they_say(name, rhs, value):
    cfg, _ = _load(f"{name}={rhs}")
    section, key = name.split(".")
    assert getattr(getattr(cfg, section), key) == value


def _text_keys():
    """Every key whose value is free text (a name, a path, a label), found by what its check
    takes: any word, not only numbers or a list of words."""
    defaults = config.Config()
    for section, checks in config.schema().items():
        hints = get_type_hints(type(getattr(defaults, section)))
        for key, check in checks.items():
            if hints[key] is str and check.ok("+42") and check.ok("a-word"):
                yield f"{section}.{key}"


TEXT_KEYS = list(_text_keys())


def test_the_text_keys_are_found():
    assert {"run.name", "run.dir", "data.root", "mlperf.org", "mlperf.platform"} <= set(
        TEXT_KEYS)
    assert "run.stall_timeout_s" not in TEXT_KEYS       # auto or a number: read as a number


@pytest.mark.parametrize("name, rhs, value", [("run.stall_timeout_s", "+42", "42"),
                                              ("run.stall_timeout_s", "1_000", "1000"),
                                              ("train.loss_scale", "1.50", "1.5")])
def test_a_word_or_number_key_takes_any_spelling_of_the_number(name, rhs, value):
    cfg, _ = _load(f"{name}={rhs}")
    section, key = name.split(".")
    assert getattr(getattr(cfg, section), key) == value
    with pytest.raises(UsageError, match="as the octal number 8, not 10;"):
        _load(f"{name}=010")


@pytest.mark.parametrize("name", TEXT_KEYS)
@pytest.mark.parametrize("rhs, read, what", [("010", "8", "number"), ("+42", "42", "number"),
                                             ("1_000", "1000", "number"),
                                             ("1.50", "1.5", "number"),
                                             (".NaN", "nan", "number"),
                                             ("2019-04-01 1:02:03", "2019-04-01 01:02:03",
                                              "date")])
def test_a_text_key_given_a_plain_number_or_date_that_reads_otherwise(name, rhs, read, what):
    if name == "run.name" and ":" in rhs:
        pytest.skip("run.name takes no ':'")
    with pytest.raises(UsageError, match="^" + re.escape(
            f"override '{name}={rhs}': YAML reads the plain {rhs} as the {what} ") + ".*"
            + re.escape(f", so {name} would be '{read}'; quote it to mean the text ({name}: "
                        f"'{rhs}' in a file, {name}=\"'{rhs}'\" in a shell)") + "$"):
        _load(f"{name}={rhs}")
    quoted, _ = _load(f"{name}='{rhs}'")
    section, key = name.split(".")
    assert getattr(getattr(quoted, section), key) == rhs


@pytest.mark.parametrize("name", TEXT_KEYS)
@pytest.mark.parametrize("rhs, what", [("NO", "the flag false"), ("on", "the flag true"),
                                       ("Yes", "the flag true"), ("~", "null \\(no value\\)"),
                                       ("null", "null \\(no value\\)")])
def test_a_text_key_given_a_plain_flag_or_null(name, rhs, what, tmp_path):
    # the "Norway problem": mlperf.org: NO is the flag false to YAML 1.1
    with pytest.raises(UsageError, match=f"^override '{name}={re.escape(rhs)}': YAML reads the "
                                         f"plain {re.escape(rhs)} as {what}, not text; quote "
                                         f"it to mean the text"):
        _load(f"{name}={rhs}")
    section, key = name.split(".")
    with pytest.raises(UsageError, match=f"^config key {name}={re.escape(rhs)} in .*c.yaml "
                                         f"\\(line 1\\): YAML reads the plain"):
        _load(text=f"{section}: {{{key}: {rhs}}}\n", tmp_path=tmp_path)


@pytest.mark.parametrize("rhs", ["42", "1.5", "2019-04-01", "1e3", "0o17", "x010"])
def test_a_text_key_given_what_reads_as_its_own_text(rhs):
    cfg, _ = _load(f"run.name={rhs}")
    assert cfg.run.name == rhs


def test_the_rule_comes_before_the_loaders_checks_of_the_value_yaml_read():
    # warm-up 9 epochs of 10 typed as 010: the loader would see 8 epochs, and say so
    with pytest.raises(UsageError, match="^override 'train.epochs=010': YAML 1.1 reads 010"):
        _load("schedule.warmup_epochs=9", "train.epochs=010")


def test_the_last_override_of_a_key_is_the_one_checked():
    cfg, _ = _load("run.name=010", "run.name=x")
    assert cfg.run.name == "x"


def test_train_check_config_and_jobs_refuse_in_one_line_before_any_work(tmp_path):
    for argv in (["check-config", TINY, "run.name=007", "--world-size", "1"],
                 ["train", TINY, "run.name=007", f"run.dir={tmp_path}/runs"],
                 ["jobs", "render", "--scheduler", "slurm", "--nodes", "1", "--gpus-per-node",
                  "2", "--config", TINY, "run.name=007", "-o", f"{tmp_path}/job.sh"]):
        p = subprocess.run([YASGD, *argv], capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, OMP_NUM_THREADS="1"))
        assert (p.returncode, p.stdout) == (2, ""), p.stderr
        assert p.stderr == ("yasgd: error: override 'run.name=007': YAML reads the plain 007 "
                            "as the number 7, so run.name would be '7'; quote it to mean the "
                            "text (run.name: '007' in a file, run.name=\"'007'\" in a "
                            "shell)\n")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("rhs", ["0" + "1" * 5000, "0x" + "f" * 5000, "0b" + "1" * 15000])
@pytest.mark.parametrize("name", ["train.max_steps", "run.name", "optim.lr"])
def test_a_number_too_long_to_print_is_one_short_line(name, rhs):
    # octal, hex and binary have no digit limit in Python, its decimal form has one: the
    # loader's line, which shows the value, ended in a traceback
    with pytest.raises(UsageError, match="no key takes one beyond 64 bits$") as e:
        _load(f"{name}={rhs}")
    assert len(str(e.value)) < 200


@pytest.mark.parametrize("name", ["train.max_steps", "run.name"])
def test_a_leading_zero_number_too_long_to_read_in_decimal_is_one_short_line(name):
    # its octal reading prints (about 3,970 digits); its decimal one has more digits than
    # Python reads
    rhs = "0" + "1" * 4400
    with pytest.raises(UsageError, match=f"^override '{name}=0111.* YAML (1.1 )?reads (the "
                                         f"plain )?0111.* \\(4,401 characters\\) as the") as e:
        _load(f"{name}={rhs}")
    assert len(str(e.value)) < 500          # each long value shortened, not 4,400 digits


def test_a_number_beyond_64_bits_that_prints_is_left_to_the_loader():
    with pytest.raises(UsageError, match="^config key train.max_steps must be an integer >= 0 "
                                         "that fits in 64 bits, got 120892581961\\.\\.\\. "
                                         "\\(25 digits\\)$"):
        _load("train.max_steps=0x1" + "0" * 20)


def test_a_date_for_a_key_that_takes_no_text_says_what_the_key_takes(tmp_path):
    with pytest.raises(UsageError, match="^config key run.seed=2026-12-07 in .*c.yaml \\(line "
                                         "1\\): YAML reads 2026-12-07 as a date, and run.seed "
                                         "must be an integer in \\[0, 4294967295\\]$"):
        _load(text="run: {seed: 2026-12-07}\n", tmp_path=tmp_path)


def test_what_yaml_cannot_build_is_left_to_the_loader():
    for over in ("run.seed=2019-02-30", "train.max_steps=" + "1" * 5000):
        with pytest.raises(UsageError, match="^config key .* must be an integer"):
            _load(over)
