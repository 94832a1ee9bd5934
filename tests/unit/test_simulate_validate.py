"""The validation table (``yasgd simulate --validate``) recomputed from the presets.

The published side comes from examples/results/mlperf_logs.json (read from the MLPerf logs by
one rule, checked here for internal consistency); the model side is recomputed and compared with
examples/results/simulate_validation.json, so a constant that moves any prediction by more than
half a percentage point fails this test and the table must be re-recorded with the single-node
source that justified the change.
"""
import json
import math
import os
import subprocess
import sys

import pytest

from yasgd.simulate import validate

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _rec(name):
    with open(os.path.join(REPO, "examples", "results", name)) as f:
        return json.load(f)


def test_published_side_follows_the_reading_rule():
    for m in _rec("mlperf_logs.json")["multi_node"]:
        steps = math.ceil(1_281_167 / m["global_batch"])
        assert m["steps_per_epoch"] == steps and m["per_gpu_batch"] * m["gpus"] == m["global_batch"]
        assert m["images_per_s"] == pytest.approx(m["global_batch"] * steps / m["median_epoch_s"],
                                                  rel=1e-6)
        used = [r for r in m["runs"] if r["file"] in m["runs_used"]]
        assert all(r["stamps_cover_run"] >= 0.8 for r in used) and used
        mid = sorted(r["run_s"] for r in m["runs"])[1:-1]
        assert m["score_s"] == pytest.approx(sum(mid) / 3, abs=1e-3)   # middle three of five


def test_table_recomputed_from_the_presets():
    want = _rec("simulate_validation.json")
    tol = want["tolerance_pct_points"] / 100
    got = validate.rows()
    assert [r["case"] for r in got] == [r["case"] for r in want["rows"]]
    for g, w in zip(got, want["rows"]):
        assert g["err_images_per_s"] == pytest.approx(w["err_images_per_s"], abs=tol), g["case"]
        assert g["err_time"] == pytest.approx(w["err_time"], abs=tol), g["case"]
        assert (g["gpus"], g["batch"], g["preset"]) == (w["gpus"], w["batch"], w["preset"])
    s = validate.summary(got)
    assert s["cases"] == 1 + len(_rec("mlperf_logs.json")["multi_node"]) == 21
    assert s["within_15"] == want["summary"]["within_15"]
    held = [g for g in got if g["held_out"]]
    assert [g["case"] for g in held] == [w["case"] for w in want["rows"] if w["held_out"]]
    assert validate.summary(held)["within_15"] == want["summary_held_out"]["within_15"]


def test_held_out_cases_are_marked_and_have_their_rounds_single_node_log():
    # the held-out runs were recorded after the model was fixed; each is judged on its own
    # round's single-node log, which the preset gained with it (not another round's)
    logs = _rec("mlperf_logs.json")
    held = [m for m in logs["multi_node"] if m.get("held_out")]
    assert {m["case"] for m in held} == {
        "NVIDIA DGX H100 x 4 preview, v2.1", "NVIDIA Eos DGX H100 x 8, v3.1",
        "NVIDIA DGX A100 x 2, v0.7", "NVIDIA DGX A100 x 96, v0.7", "NVIDIA DGX A100 x 8, v1.0",
        "NVIDIA DGX A100 x 8, v1.1", "NVIDIA DGX A100 x 128, v1.1", "NVIDIA DGX A100 x 540, v1.1",
        "NVIDIA DGX A100 x 8, v2.0", "NVIDIA DGX A100 x 128, v2.0"}
    assert "held_out" in logs["rule"]
    from yasgd.simulate import presets
    rows = {r["case"]: r for r in validate.rows()}
    for m in held:
        s = presets.single_node(presets.get_preset(m["preset"]), m["mlperf_round"])
        assert s.source.startswith(m["repository"] + " ")
        r = rows[m["case"]]
        assert r["held_out"] and r["mlperf_round"] == r["software_round"] == m["mlperf_round"]
    out = validate.table()
    marked = [c for c in (line.split("  ")[0] for line in out.splitlines()) if c.endswith(" *")]
    assert marked == [m["case"] + " *" for m in held]
    assert "* held out, recorded after the model's constants and method were fixed: " \
        f"|error| over {len(held)} cases" in out


def test_acceptance_from_the_presets():
    # issue 20: median |error| <= 10 % and worst <= 25 % on images/s and on time to train over
    # the multi-node cases; beyond 15 % only with a named explanation; the paper within 15 %
    rs = validate.rows()
    s = validate.summary(rs)
    assert s["median_images_per_s"] <= 0.10 and s["median_time"] <= 0.10
    assert s["worst_images_per_s"] <= 0.25 and s["worst_time"] <= 0.25
    for r in rs:
        if abs(r["err_images_per_s"]) > .15 or abs(r["err_time"]) > .15:
            assert r["case"] in validate.EXPLANATIONS, r["case"]
    paper = rs[0]
    assert abs(paper["err_images_per_s"]) <= .15 and abs(paper["err_time"]) <= .15


def test_record_writes_what_the_presets_give(tmp_path):
    path = tmp_path / "v.json"
    out = validate.record(str(path))
    assert json.loads(path.read_text()) == out == _rec("simulate_validation.json")


def test_paper_case_uses_its_own_figures():
    row = validate.rows()[0]
    assert row["case"].startswith("paper") and row["images_per_s"] == 1.73e6
    assert row["time_s"] == 74.7 and row["mlperf_round"] == "v0.5"


def test_cli_validate_prints_the_table_and_refuses_other_arguments():
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-m", "yasgd.cli", "simulate", "--validate"], cwd=REPO,
                       capture_output=True, text=True, env=env)
    assert p.returncode == 0 and p.stdout.strip() == validate.table()
    p = subprocess.run([sys.executable, "-m", "yasgd.cli", "simulate", "--validate", "--gpus",
                        "8"], cwd=REPO, capture_output=True, text=True, env=env)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.startswith("yasgd: error:") and len(p.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args,got", [
    ("--validate --gpus 2048", "--gpus"), ("--validate --preset abci2019", "--preset"),
    ("--validate --epochs 90.0", "--epochs"), ("--validate --gpus=2048", "--gpus"),
    ("--validate --gp 2048", "--gpus"), ("--json x.json --validate", "--json"),
    ("--preset list --batch 81920", "--batch")])
def test_an_option_typed_with_validate_is_refused_even_at_its_default(args, got):
    # what was typed counts, not whether it differs from the default (--gp: an abbreviation)
    p = subprocess.run([sys.executable, "-m", "yasgd.cli", "simulate", *args.split()], cwd=REPO,
                       capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    alone = "--validate" if "--validate" in args else "--preset list"
    assert (p.returncode, p.stdout) == (2, ""), p.stdout
    assert p.stderr == f"yasgd: error: simulate {alone} takes no other argument, got {got}\n"
