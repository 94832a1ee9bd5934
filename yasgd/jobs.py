"""Cluster job scripts: ``yasgd jobs render`` and ``yasgd jobs submit``.

The templates are the job scripts themselves (``jobs/abci/pbs/train.sh``,
``jobs/abci/uge/train.sh``, ``jobs/slurm/train.sbatch``): rendering rewrites
their scheduler directives (nodes, walltime, queue, group) and the block between
``# >>> yasgd jobs render`` and ``# <<< yasgd jobs render`` (repository,
config, overrides), so a rendered script is the tested script with its values
filled in. Everything is validated before anything is written: the config
(with the overrides) must load, and its global batch must split over
``nodes x gpus_per_node`` ranks.

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
from typing import Dict, List, Optional, Sequence

from yasgd import UsageError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEMPLATES = {"pbs": "jobs/abci/pbs/train.sh", "uge": "jobs/abci/uge/train.sh",
             "slurm": "jobs/slurm/train.sbatch"}
DEFAULT_GPUS_PER_NODE = {"pbs": 8, "uge": 4, "slurm": 8}
DEFAULT_QUEUE = {"pbs": "rt_HF", "uge": "rt_F", "slurm": None}
SUBMIT_COMMAND = {"pbs": "qsub", "uge": "qsub", "slurm": "sbatch"}
BEGIN, END = "# >>> yasgd jobs render", "# <<< yasgd jobs render"
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


def parse_walltime(text: str) -> int:
    """``H:MM:SS``, ``H:MM`` or minutes -> seconds."""
    m = re.fullmatch(r"(\d+):([0-5]\d):([0-5]\d)", text) or re.fullmatch(r"(\d+):([0-5]\d)", text)
    if m:
        parts = [int(x) for x in m.groups()] + [0]
        return parts[0] * 3600 + parts[1] * 60 + parts[2]
    if re.fullmatch(r"\d+", text):
        return int(text) * 60
    raise UsageError(f"walltime must be H:MM:SS, H:MM or minutes, got {text!r}")


def format_walltime(seconds: int) -> str:
    h, rest = divmod(int(seconds), 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}"


def default_walltime(cfg, gpus: int) -> int:
    """Seconds: 2x the images of the run at 400 img/s per GPU (the paper's 845
    halved) plus 10 min of start-up and evaluation, rounded up to 5 minutes,
    at least 15 minutes. The paper's run (90 epochs, 2,048 GPUs): 0:15:00."""
    t = cfg.train
    samples = cfg.data.limit or (cfg.data.synthetic_samples if cfg.data.kind == "synthetic"
                                 else EPOCH_SAMPLES.get(cfg.data.kind, 1281167))
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


def _config_path(config: str) -> str:
    """Relative to the repository when inside it (the job runs there), else absolute."""
    path = os.path.abspath(config)
    rel = os.path.relpath(path, REPO)
    return path if rel.startswith("..") else rel


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
    if scheduler == "uge" and gpn != 4:
        print(f"yasgd: warning: ABCI 2019 (UGE, rt_F) nodes hold 4 GPUs; rendering for {gpn}",
              file=sys.stderr)
    for name, value in (("group", group), ("queue", queue)):
        if value is not None and not re.fullmatch(r"[A-Za-z0-9_.@:+-]+", value):
            raise UsageError(f"--{name} must be a plain name, got {value!r}")
    if not config:
        raise UsageError("--config is required")
    cfg = config_mod.load(config, list(overrides))
    ranks = nodes * gpn
    per_rank = config_mod.per_rank_batch(cfg, ranks)
    seconds = parse_walltime(walltime) if walltime else default_walltime(cfg, ranks)
    if seconds <= 0:
        raise UsageError(f"walltime must be positive, got {walltime!r}")
    wt = format_walltime(seconds)
    queue = queue or DEFAULT_QUEUE[scheduler]

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

    block = [
        f"{BEGIN}: rendered for {nodes} node(s) x "
        f"{gpn} GPU(s) = {ranks} rank(s), {per_rank} image(s) per rank per step",
        f'YASGD_HOME="${{YASGD_HOME:-{REPO}}}"',
        f'YASGD_CONFIG="${{YASGD_CONFIG:-{_config_path(config)}}}"',
        "YASGD_RENDERED_ARGS=(" + " ".join(shlex.quote(o) for o in overrides) + ")",
        END,
    ]
    start, stop = text.find(BEGIN), text.find(END)
    if start < 0 or stop < 0:
        raise AssertionError(f"{TEMPLATES[scheduler]} lacks the '{BEGIN}' block")
    text = text[:start] + "\n".join(block) + text[stop + len(END):]
    header = (f"# Rendered by: yasgd jobs render --scheduler {scheduler} --nodes {nodes} "
              f"--gpus-per-node {gpn} --config {shlex.quote(config)} --walltime {wt}"
              + (f" --group {group}" if group else "") + (f" --queue {queue}" if queue else "")
              + "".join(" " + shlex.quote(o) for o in overrides) + f"\n# from {TEMPLATES[scheduler]}\n")
    first_nl = text.index("\n") + 1
    directives = re.match(r"(?:#(?:PBS|\$|SBATCH|#SBATCH) .*\n)*", text[first_nl:]).end()
    cut = first_nl + directives
    return text[:cut] + header + text[cut:]


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
        cmd.append(output)
    return cmd


def submit(script_text: str, scheduler: str, output: Optional[str] = None,
           dry_run: bool = False) -> int:
    """Submit with qsub (PBS; UGE: ``qsub -g GROUP``) or sbatch; the exit status of
    that command. ``output``: also write the script there and submit that file
    (else it goes on stdin). ``dry_run``: print the command (and the script when
    it has no file), submit nothing."""
    cmd = submit_command(script_text, scheduler, output)
    if output:
        with open(output, "w") as f:
            f.write(script_text)
        os.chmod(output, 0o755)
    if dry_run:
        where = "" if output else " < (script on stdin)"
        print(f"would run: {shlex.join(cmd)}{where}")
        if not output:
            sys.stdout.write(script_text)
        return 0
    exe = shutil.which(cmd[0])
    if exe is None:
        raise UsageError(f"{cmd[0]} not found on PATH: submit on the cluster's login node, "
                         f"or write the script with `yasgd jobs render -o FILE`")
    proc = subprocess.run([exe] + cmd[1:], input=None if output else script_text, text=True)
    return proc.returncode
