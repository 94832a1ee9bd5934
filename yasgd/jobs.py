"""Cluster job scripts: ``yasgd jobs render`` and ``yasgd jobs submit``.

The templates are the job scripts themselves (``jobs/abci/pbs/train.sh``,
``jobs/abci/uge/train.sh``, ``jobs/slurm/train.sbatch``): rendering rewrites
their scheduler directives (nodes, walltime, queue, group) and the block between
``# >>> yasgd jobs render`` and ``# <<< yasgd jobs render`` (repository,
config, overrides), so a rendered script is the tested script with its values
filled in. Everything is validated before anything is written: the config
(with the overrides) must load, and its global batch must split over
``nodes x gpus_per_node`` ranks.

Shell safety: every value the user gives (repository, config path, overrides)
reaches the script as one shell word quoted by :func:`shell_word`, and reaches a
comment only through :func:`one_line`; a newline or NUL in a value is refused.
Values that land in a scheduler directive (queue, group), which no shell reads,
must match :data:`DIRECTIVE_NAMES`. The walltime and the counts are rewritten
from the numbers they parse to. A path names the file the user named, as the job
sees it (:func:`rendered_path`), and never starts with ``-`` (:func:`dash_safe`).

Defaults: PBS (ABCI 3.0) 8 GPUs per node and queue ``rt_HF``; UGE (ABCI 2019)
4 GPUs per node and resource type ``rt_F``; Slurm 8 GPUs per node. The
walltime, unless given, is estimated from the config (:func:`default_walltime`).
"""
from __future__ import annotations

import math
import os
import re
import shlex
import shutil
import subprocess
import sys
from typing import List, Optional, Sequence, Tuple

from yasgd import UsageError, config_device, config_text, outputs
from yasgd.argtypes import YEAR_S

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEMPLATES = {"pbs": "jobs/abci/pbs/train.sh", "uge": "jobs/abci/uge/train.sh",
             "slurm": "jobs/slurm/train.sbatch"}
DEFAULT_GPUS_PER_NODE = {"pbs": 8, "uge": 4, "slurm": 8}
DEFAULT_QUEUE = {"pbs": "rt_HF", "uge": "rt_F", "slurm": None}
SUBMIT_COMMAND = {"pbs": "qsub", "uge": "qsub", "slurm": "sbatch"}
BEGIN, END = "# >>> yasgd jobs render", "# <<< yasgd jobs render"
RENDERED_BY = "# Rendered by: "   # + the command: the header of every rendered script
# What `-o DIR` writes inside an existing directory DIR.
SCRIPT_NAME = {"pbs": "job.sh", "uge": "job.sh", "slurm": "job.sbatch"}

# Names that land in a directive line (#PBS, #$, #SBATCH, and the
# `# yasgd-submit: qsub -g` line): the scheduler parses these itself, with no
# shell and no quoting, so only a conservative subset of the names it accepts
# passes. Every set starts with a letter, digit or '_' (a value never reads as
# an option) and none holds a blank, a quote, '#', ';', '$' or '='.
_NAME = r"[A-Za-z0-9_][A-Za-z0-9_.-]*"
DIRECTIVE_NAMES = {
    # PBS Professional, `-q`: a queue name (letters, digits, '_', '-', first a
    # letter), optionally at a server (`queue@host`).
    ("pbs", "queue"): (r"[A-Za-z][A-Za-z0-9_-]*(?:@[A-Za-z0-9][A-Za-z0-9.-]*)?",
                       "a PBS queue name (letters, digits, '_', '-', first a letter; optionally @server)"),
    # PBS Professional, `-P`: a project name (on ABCI the group, e.g. gaa50000).
    ("pbs", "group"): (_NAME, "a PBS project name (letters, digits, '_', '.', '-')"),
    # UGE, `-l RESOURCE=N`: a complex (resource type) name such as rt_F or rt_G.small.
    ("uge", "queue"): (r"[A-Za-z_][A-Za-z0-9_.-]*",
                       "a UGE resource type name (letters, digits, '_', '.', '-', first a letter or '_')"),
    # UGE, `qsub -g`: the ABCI group (a UNIX group name).
    ("uge", "group"): (_NAME, "a UGE group name (letters, digits, '_', '.', '-')"),
    # Slurm, `--partition`: one partition name or a comma-separated list of them.
    ("slurm", "queue"): (rf"{_NAME}(?:,{_NAME})*",
                         "Slurm partition names (letters, digits, '_', '.', '-'; comma-separated)"),
    # Slurm, `--account`: an account name.
    ("slurm", "group"): (_NAME, "a Slurm account name (letters, digits, '_', '.', '-')"),
}
# The line a rendered UGE script carries for `yasgd jobs submit` (qsub -g GROUP).
UGE_GROUP = re.compile(r"^# yasgd-submit: qsub -g (\S+)\s*$", re.M)

# Training images per epoch by data kind (ImageNet-1k for RecordIO).
EPOCH_SAMPLES = {"fashion_mnist": 60000, "recordio": 1281167}
# Images per second per GPU assumed by the walltime estimate: the paper's
# 1.73 M img/s on 2,048 V100 is 845; halved for safety. CPU-only jobs are not
# estimated here (tests pass --walltime or accept the floor).
WALLTIME_IMG_PER_GPU_S = 400.0
WALLTIME_STARTUP_S = 600.0
WALLTIME_FLOOR_S = 15 * 60


def _template(scheduler: str) -> str:
    path = os.path.join(REPO, TEMPLATES[scheduler])
    if not os.path.isfile(path):
        raise UsageError(f"job script template {path} not found (yasgd must run from its repository)")
    with open(path) as f:
        return f.read()


def plain_value(option: str, value: str) -> str:
    """``value`` unchanged, unless it holds a newline or NUL (UsageError naming
    ``option``): the one thing a job script cannot carry on one line."""
    if "\n" in value or "\0" in value:
        raise UsageError(f"{option} must not contain a newline or NUL, got {value!r}")
    return value


def shell_word(value: str) -> str:
    """``value`` as one shell word that bash reads back unchanged: the quoting
    rule of every value in a rendered script. ``shlex.quote``: bare when it
    holds only ``[A-Za-z0-9_@%+=:,./-]`` (nothing bash expands, splits or
    globs), else in single quotes, inside which nothing is special (a ``'`` in
    the value becomes ``'"'"'``)."""
    return shlex.quote(value)


def one_line(text: str) -> str:
    """``text`` for a comment line: each character ``str.isprintable`` rejects
    (newline, carriage return, tab, escape, ...) written as its Python escape
    (``\\n``), so a comment can never end early and run the rest as a command."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _directive_name(scheduler: str, option: str, value: Optional[str]) -> Optional[str]:
    if value is None:
        return None
    pattern, what = DIRECTIVE_NAMES[(scheduler, option)]
    if not re.fullmatch(pattern, value):
        raise UsageError(f"--{option} must be {what}, got {value!r}")
    return value


# no scheduler queue grants a job more (ABCI's longest: 168 hours); a typo stops here
MAX_WALLTIME_S = YEAR_S


def parse_walltime(text: str) -> int:
    """``H:MM:SS``, ``H:MM`` or minutes -> seconds."""
    m = re.fullmatch(r"(\d+):([0-5]\d):([0-5]\d)", text) or re.fullmatch(r"(\d+):([0-5]\d)", text)
    if m:
        parts = [int(x) for x in m.groups()] + [0]
        return parts[0] * 3600 + parts[1] * 60 + parts[2]
    if re.fullmatch(r"\d+", text):
        return int(text) * 60
    raise UsageError(f"--walltime must be H:MM:SS, H:MM or minutes, got {text!r}")


def format_walltime(seconds: int) -> str:
    h, rest = divmod(int(seconds), 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}"


def default_walltime(cfg, gpus: int) -> int:
    """Seconds: 2x the images of the run at 400 img/s per GPU (the paper's 845
    halved) plus 10 min of start-up and evaluation, rounded up to 5 minutes,
    at least 15 minutes. The paper's run (90 epochs, 2,048 GPUs): 0:15:00."""
    t = cfg.train
    # an epoch as the loader makes it: synthetic data has its own size and reads no
    # data.limit (yasgd.config_text.READ_ONLY_WITH)
    samples = (cfg.data.synthetic_samples if cfg.data.kind == "synthetic" else
               cfg.data.limit or EPOCH_SAMPLES.get(cfg.data.kind, 1281167))
    steps = t.epochs * max(1, samples // t.global_batch)
    if t.max_steps:
        steps = min(steps, t.max_steps)
    seconds = 2 * steps * t.global_batch / (WALLTIME_IMG_PER_GPU_S * gpus) + WALLTIME_STARTUP_S
    seconds = math.ceil(seconds / 300.0) * 300
    return int(max(WALLTIME_FLOOR_S, seconds))


def _sub_line(text: str, pattern: str, line: str) -> str:
    new, n = re.subn(pattern, lambda _m: line, text, count=1, flags=re.M)
    if n != 1:
        raise AssertionError(f"template line {pattern!r} not found")
    return new


def dash_safe(path: str) -> str:
    """``path``, with ``./`` before it where it starts with ``-``: the job's commands
    (``yasgd check-config``, ``yasgd train``, qsub, sbatch) would read it as an option."""
    return "./" + path if path.startswith("-") else path


def rendered_path(path: str) -> str:
    """``path`` as a job running in the repository names the very file ``path`` names:
    relative to the repository when inside it, else absolute. The absolute form keeps
    the names as given (symbolic links included) where it is the same file; otherwise
    (``link/..``: the system goes up from the link's target, :func:`os.path.abspath`
    drops the link) it is :func:`os.path.realpath`. A relative result: :func:`dash_safe`."""
    absolute = os.path.abspath(path)
    try:
        same = os.path.samefile(absolute, path)
    except OSError:
        same = False
    if not same:
        absolute = os.path.realpath(path)
    # the repository as given and as resolved: a real path starts with the latter
    for repo in (REPO, os.path.realpath(REPO)):
        if absolute.startswith(repo.rstrip(os.sep) + os.sep):
            return dash_safe(os.path.relpath(absolute, repo))
    return absolute


class Script(str):
    """A rendered job script (its text) with the warnings it waits to print until it is
    written or submitted (:func:`say_warnings`): every check has passed by then, so a
    refused command still says one line."""
    warnings: Tuple[str, ...] = ()


def say_warnings(script_text: str) -> None:
    for line in getattr(script_text, "warnings", ()):
        print(f"yasgd: warning: {one_line(line)}", file=sys.stderr)


def render(scheduler: str, nodes: int, gpus_per_node: Optional[int] = None, config: str = "",
           walltime: Optional[str] = None, group: Optional[str] = None, queue: Optional[str] = None,
           overrides: Sequence[str] = ()) -> str:
    """A ready job script for ``scheduler`` (pbs | uge | slurm), as text."""
    from yasgd import config as config_mod

    if scheduler not in TEMPLATES:
        raise UsageError(f"unknown scheduler {scheduler!r} (known: {', '.join(TEMPLATES)})")
    if not isinstance(nodes, int) or nodes < 1:
        raise UsageError(f"--nodes must be at least 1, got {nodes}")
    gpn = DEFAULT_GPUS_PER_NODE[scheduler] if gpus_per_node is None else gpus_per_node
    if not isinstance(gpn, int) or gpn < 1:
        raise UsageError(f"--gpus-per-node must be at least 1, got {gpn}")
    group = _directive_name(scheduler, "group", group)
    queue = _directive_name(scheduler, "queue", queue)
    if not config:
        raise UsageError("--config is required")
    plain_value("--config", config)
    config_text.check_overrides(overrides)
    plain_value("the repository path", REPO)
    if walltime is not None:
        plain_value("--walltime", walltime)
    cfg = config_text.load(config, overrides)
    ranks = nodes * gpn
    per_rank = config_mod.per_rank_batch(cfg, ranks)
    config_device.check(cfg, "gpu", ranks)   # the job's ranks: one a GPU each
    seconds = parse_walltime(walltime) if walltime is not None else default_walltime(cfg, ranks)
    if seconds <= 0:
        raise UsageError(f"--walltime must be positive, got {walltime!r}")
    if seconds > MAX_WALLTIME_S:
        limit = format_walltime(MAX_WALLTIME_S)
        raise UsageError(f"--walltime must be at most a year ({limit}), got {walltime!r}"
                         if walltime is not None else
                         f"the run's estimated walltime {format_walltime(seconds)} is more than "
                         f"a year ({limit}): fewer epochs, more --nodes, or --walltime")
    wt = format_walltime(seconds)
    queue = queue or DEFAULT_QUEUE[scheduler]
    warnings = ([f"ABCI 2019 (UGE, rt_F) nodes hold 4 GPUs; rendering for {gpn}"]
                if scheduler == "uge" and gpn != 4 else [])

    text = _template(scheduler)
    if scheduler == "pbs":
        text = _sub_line(text, r"^#PBS -q .*$", f"#PBS -q {queue}")
        text = _sub_line(text, r"^#PBS -l select=.*$", f"#PBS -l select={nodes}:mpiprocs={gpn}")
        text = _sub_line(text, r"^#PBS -l walltime=.*$", f"#PBS -l walltime={wt}")
        text = _sub_line(text, r"^#PBS -P .*$",
                         f"#PBS -P {group}" if group else "# (no --group: qsub -P GROUP)")
    elif scheduler == "uge":
        text = _sub_line(text, r"^#\$ -l rt_F=.*$", f"#$ -l {queue}={nodes}")
        text = _sub_line(text, r"^#\$ -l h_rt=.*$", f"#$ -l h_rt={wt}")
        text = _sub_line(text, UGE_GROUP.pattern,
                         f"# yasgd-submit: qsub -g {group}" if group else
                         "# yasgd-submit: qsub -g GROUP (no --group given)")
    else:
        text = _sub_line(text, r"^#SBATCH --nodes=.*$", f"#SBATCH --nodes={nodes}")
        text = _sub_line(text, r"^#SBATCH --ntasks-per-node=.*$", f"#SBATCH --ntasks-per-node={gpn}")
        text = _sub_line(text, r"^#SBATCH --gpus-per-node=.*$", f"#SBATCH --gpus-per-node={gpn}")
        text = _sub_line(text, r"^#SBATCH --time=.*$", f"#SBATCH --time={wt}")
        if queue:
            text = _sub_line(text, r"^##SBATCH --partition=.*$", f"#SBATCH --partition={queue}")
        if group:
            text = _sub_line(text, r"^##SBATCH --account=.*$", f"#SBATCH --account={group}")

    # Values from the user: one shell word each (shell_word); the environment's
    # YASGD_HOME and YASGD_CONFIG still win when set and not empty. shellcheck
    # would flag a `$`, a backtick, a trailing backslash or a typographic quote
    # inside single quotes, which are literal here on purpose.
    literal = "# shellcheck disable=SC1003,SC1112,SC2016"
    config_word = shell_word(rendered_path(config))
    block = [
        f"{BEGIN}: rendered for {nodes} node(s) x "
        f"{gpn} GPU(s) = {ranks} rank(s), {per_rank} image(s) per rank per step",
        "# Each value below is one shell word, taken literally.",
        literal,
        f'if [ -z "${{YASGD_HOME:-}}" ]; then YASGD_HOME={shell_word(REPO)}; fi',
        literal,
        f'if [ -z "${{YASGD_CONFIG:-}}" ]; then YASGD_CONFIG={config_word}; fi',
        literal,
        "YASGD_RENDERED_ARGS=(" + " ".join(shell_word(o) for o in overrides) + ")",
        END,
    ]
    start, stop = text.find(BEGIN), text.find(END)
    if start < 0 or stop < 0:
        raise AssertionError(f"{TEMPLATES[scheduler]} lacks the '{BEGIN}' block")
    text = text[:start] + "\n".join(block) + text[stop + len(END):]
    argv = ["yasgd", "jobs", "render", "--scheduler", scheduler, "--nodes", str(nodes),
            "--gpus-per-node", str(gpn), "--config", config, "--walltime", wt]
    argv += (["--group", group] if group else []) + (["--queue", queue] if queue else [])
    header = (f"{RENDERED_BY}{one_line(shlex.join(argv + list(overrides)))}\n"
              f"# from {TEMPLATES[scheduler]}\n")
    first_nl = text.index("\n") + 1
    directives = re.match(r"(?:#(?:PBS|\$|SBATCH|#SBATCH) .*\n)*", text[first_nl:]).end()
    cut = first_nl + directives
    script = Script(text[:cut] + header + text[cut:])
    script.warnings = tuple(warnings)
    return script


def submit_command(script_text: str, scheduler: str, output: Optional[str] = None) -> List[str]:
    """The argv that submits the script (file ``output``, else the script on stdin)."""
    if scheduler not in SUBMIT_COMMAND:
        raise UsageError(f"unknown scheduler {scheduler!r} (known: {', '.join(SUBMIT_COMMAND)})")
    cmd = [SUBMIT_COMMAND[scheduler]]
    if scheduler == "uge":
        m = UGE_GROUP.search(script_text)
        if not m or m.group(1) == "GROUP":
            raise UsageError("ABCI's UGE needs a group (qsub -g GROUP): render with --group")
        cmd += ["-g", m.group(1)]
    if output:
        cmd.append(dash_safe(output))
    return cmd


def output_path(output: str, scheduler: str) -> str:
    """Where ``-o OUTPUT`` writes the script: OUTPUT itself, or
    ``OUTPUT/job.sh`` (``job.sbatch`` for Slurm) when OUTPUT is a directory.
    UsageError unless that is a writable regular file or a new file in an
    existing, writable directory; nothing is left behind (yasgd.writable tries)."""
    if not output:
        raise UsageError("--output must not be empty")
    plain_value("--output", output)
    path = output
    if os.path.isdir(path):
        path = os.path.join(path, SCRIPT_NAME[scheduler])
    elif output.endswith(os.sep):
        raise UsageError(f"--output {output!r}: no such directory")
    problem = outputs.file_problem(
        path, ours=lambda head: f"\n{RENDERED_BY}yasgd jobs render ".encode() in head,
        kind="a job script written by yasgd jobs render")
    if problem:
        raise UsageError(f"--output {output!r}: {problem}")
    return path


def write_script(script_text: str, path: Optional[str] = None, executable: bool = False) -> None:
    """The script into ``path`` (from :func:`output_path`), else onto stdout.
    Undecodable bytes of the arguments (``surrogateescape``) are written back as
    the bytes they were, so the script names the very files the user named."""
    data = script_text.encode("utf-8", "surrogateescape")
    if path is None:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    else:
        try:
            outputs.write_bytes(path, data, 0o755 if executable else None)
        except OSError as e:
            raise UsageError(f"cannot write --output {path!r}: {e.strerror or e}")
    say_warnings(script_text)


def submit(script_text: str, scheduler: str, output: Optional[str] = None,
           dry_run: bool = False) -> int:
    """Submit with qsub (PBS; UGE: ``qsub -g GROUP``) or sbatch; the exit status of
    that command. ``output``: also write the script there (:func:`output_path`)
    and submit that file (else it goes on stdin). ``dry_run``: print the command
    (and the script when it has no file), submit nothing. Everything is checked
    before the file is written."""
    path = output_path(output, scheduler) if output is not None else None
    cmd = submit_command(script_text, scheduler, path)
    exe = None if dry_run else shutil.which(cmd[0])
    if not dry_run and exe is None:
        raise UsageError(f"{cmd[0]} not found on PATH: submit on the cluster's login node, "
                         f"or write the script with `yasgd jobs render -o FILE`")
    if path is not None:
        write_script(script_text, path, executable=True)
    if dry_run:
        where = "" if path else " < (script on stdin)"
        print(f"would run: {shlex.join(cmd)}{where}")
        if not path:
            write_script(script_text)
        return 0
    if not path:
        say_warnings(script_text)    # write_script said them where it wrote a file
    proc = subprocess.run([exe] + cmd[1:], input=None if path else
                          script_text.encode("utf-8", "surrogateescape"))
    return proc.returncode
