"""``yasgd jobs render | submit``: the paths a script carries, when the UGE warning is said,
and the script heads docs/cluster.md shows (each run through ``yasgd.cli.main``; ``submit``
only with ``--dry-run``)."""
import os
import re
import shlex
import shutil

import pytest
from yasgd import cli, jobs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = os.path.join(ROOT, "examples", "configs", "tiny.yaml")
CLUSTER_MD = os.path.join(ROOT, "docs", "cluster.md")
RENDER = ["jobs", "render", "--scheduler", "slurm", "--nodes", "1", "--gpus-per-node", "2"]


def _rendered_config(script):
    m = re.search(r"then YASGD_CONFIG=(.*); fi$", script, re.M)
    assert m, script
    return shlex.split(m.group(1))[0]


def _main(capsys, argv):
    rc = cli.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_a_dot_dot_after_a_symbolic_link_renders_the_file_it_names(tmp_path, capsys):
    # link/.. is the parent of the link's target for the system, the link's own folder
    # for a textual clean-up; a different file sits there, as a trap
    (tmp_path / "real" / "sub").mkdir(parents=True)
    shutil.copy(TINY, tmp_path / "real" / "c.yaml")
    (tmp_path / "c.yaml").write_text("not: the config\n")
    (tmp_path / "link").symlink_to(tmp_path / "real" / "sub")
    given = str(tmp_path / "link" / ".." / "c.yaml")
    rc, out, err = _main(capsys, RENDER + ["--config", given])
    assert rc == 0, err
    assert _rendered_config(out) == str(tmp_path / "real" / "c.yaml")
    assert os.path.samefile(_rendered_config(out), given)


def test_a_path_through_a_symbolic_link_that_names_the_file_is_kept(tmp_path, capsys):
    (tmp_path / "real").mkdir()
    shutil.copy(TINY, tmp_path / "real" / "c.yaml")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    rc, out, err = _main(capsys, RENDER + ["--config", str(tmp_path / "link" / "c.yaml")])
    assert rc == 0, err
    assert _rendered_config(out) == str(tmp_path / "link" / "c.yaml")


@pytest.fixture
def repo_copy(tmp_path, monkeypatch):
    """A repository of the job templates alone (jobs.REPO), to put configs into."""
    for rel in jobs.TEMPLATES.values():
        os.makedirs(tmp_path / os.path.dirname(rel), exist_ok=True)
        shutil.copy(os.path.join(ROOT, rel), tmp_path / rel)
    monkeypatch.setattr(jobs, "REPO", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("name", ["-x.yaml", "--config.yaml"])
def test_a_config_whose_relative_path_starts_with_a_dash_is_not_an_option(repo_copy, name):
    shutil.copy(TINY, repo_copy / name)
    script = jobs.render(scheduler="pbs", nodes=1, gpus_per_node=2,
                         config=str(repo_copy / name))
    assert _rendered_config(script) == "./" + name
    (repo_copy / "sub").mkdir()
    shutil.copy(TINY, repo_copy / "sub" / name)
    script = jobs.render(scheduler="pbs", nodes=1, gpus_per_node=2,
                         config=str(repo_copy / "sub" / name))
    assert _rendered_config(script) == "sub/" + name


def test_a_dot_dot_after_a_link_inside_the_repository_stays_in_it(repo_copy):
    (repo_copy / "configs" / "deep").mkdir(parents=True)
    shutil.copy(TINY, repo_copy / "configs" / "c.yaml")
    (repo_copy / "link").symlink_to(repo_copy / "configs" / "deep")
    script = jobs.render(scheduler="uge", nodes=1, gpus_per_node=4,
                         config=str(repo_copy / "link" / ".." / "c.yaml"))
    assert _rendered_config(script) == "configs/c.yaml"


def test_submit_gives_a_script_file_that_starts_with_a_dash_as_a_path(tmp_path, capsys,
                                                                      monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, out, err = _main(capsys, ["jobs", "submit", "--dry-run"] + RENDER[2:]
                         + ["--config", TINY, "-o=-job.sh"])
    assert rc == 0, err
    assert out.splitlines()[0] == "would run: sbatch ./-job.sh"
    assert (tmp_path / "-job.sh").is_file()


UGE2 = ["--scheduler", "uge", "--nodes", "1", "--gpus-per-node", "2", "--config", TINY]
WARNING = "yasgd: warning: ABCI 2019 (UGE, rt_F) nodes hold 4 GPUs; rendering for 2"


@pytest.mark.parametrize("case", ["render -o a file not a script", "submit without --group"])
def test_a_refused_uge_command_says_its_error_and_no_warning(tmp_path, capsys, case):
    other = tmp_path / "notes.txt"
    other.write_text("keep me\n")
    argv = (["jobs", "render"] + UGE2 + ["-o", str(other)] if case.startswith("render") else
            ["jobs", "submit", "--dry-run"] + UGE2)
    rc, out, err = _main(capsys, argv)
    assert rc == 2
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("yasgd: error:"), err
    assert other.read_text() == "keep me\n"


@pytest.mark.parametrize("argv", [
    ["jobs", "render"] + UGE2,
    ["jobs", "render"] + UGE2 + ["-o", "job.sh"],
    ["jobs", "submit", "--dry-run", "--group", "gab12345"] + UGE2,
    ["jobs", "submit", "--dry-run", "--group", "gab12345"] + UGE2 + ["-o", "job.sh"],
], ids=["render", "render -o", "submit", "submit -o"])
def test_a_uge_script_for_other_than_4_gpus_is_warned_about_once(tmp_path, capsys,
                                                                 monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    rc, out, err = _main(capsys, argv)
    assert rc == 0, err
    assert err.splitlines().count(WARNING) == 1, err
    assert [ln for ln in err.splitlines() if ln.startswith("yasgd: warning:")] == [WARNING]


def _doc_sections():
    """(the render command, the script head shown) of each section of docs/cluster.md
    that shows one."""
    text = open(CLUSTER_MD).read()
    found = re.findall(r"```sh\n(.*?)```\nThe rendered script begins[^\n]*\n```sh\n(.*?)```",
                       text, re.S)
    out = []
    for commands, head in found:
        joined = commands.replace("\\\n", " ")
        line = next(ln for ln in joined.splitlines() if ln.startswith("yasgd jobs render"))
        argv = shlex.split(line, comments=True)[1:]
        if "-o" in argv:                              # the head is read from stdout
            i = argv.index("-o")
            del argv[i:i + 2]
        out.append((argv, head))
    return out


def test_cluster_md_shows_every_scheduler_s_script_head():
    schedulers = [argv[argv.index("--scheduler") + 1] for argv, _ in _doc_sections()]
    assert sorted(schedulers) == sorted(jobs.TEMPLATES)


@pytest.mark.parametrize("argv, head", [
    pytest.param(argv, head, id=argv[argv.index("--scheduler") + 1])
    for argv, head in _doc_sections()])
def test_cluster_md_shows_the_head_the_render_prints(capsys, argv, head):
    rc, out, err = _main(capsys, argv)
    assert rc == 0, err
    shown = head.splitlines()
    assert out.splitlines()[:len(shown)] == shown
