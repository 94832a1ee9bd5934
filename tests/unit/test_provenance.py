"""provenance.collect, which a training's rank 0 runs into its run directory: the job's
hosts from the scheduler's host list, and a host list that cannot be read recorded as
such instead of stopping the training with a traceback."""
import pytest

from yasgd import provenance


@pytest.fixture
def clean_env(monkeypatch):
    for var in ("PBS_NODEFILE", "SGE_JOB_HOSTLIST", "SLURM_JOB_NODELIST"):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def test_hosts_of_a_pbs_nodefile(tmp_path, clean_env):
    f = tmp_path / "nodes"
    f.write_text("g0001 slots=4\n\ng0002\n")
    clean_env.setenv("PBS_NODEFILE", str(f))
    rec = provenance.collect(world_size=8)
    assert rec["hosts"] == ["g0001", "g0002"] and "hosts_problem" not in rec


@pytest.mark.parametrize("content, why", [
    (b"\xff\xfe\x00\x81" * 64, "is not a text file of host names"),
    (b"\n  \n", "lists no host")])
def test_an_unreadable_pbs_nodefile_is_recorded_not_raised(tmp_path, clean_env, content, why):
    f = tmp_path / "nodes"
    f.write_bytes(content)
    clean_env.setenv("PBS_NODEFILE", str(f))
    rec = provenance.collect(world_size=2)
    assert rec["hosts"] == [] and rec["hosts_problem"] == f"$PBS_NODEFILE {f} {why}"


def test_an_explicit_hostfile_comes_first(tmp_path, clean_env):
    mine, pbs = tmp_path / "mine", tmp_path / "pbs"
    mine.write_text("a\nb\n")
    pbs.write_text("c\n")
    clean_env.setenv("PBS_NODEFILE", str(pbs))
    assert provenance.collect(hostfile=str(mine))["hosts"] == ["a", "b"]
