"""A two-node rehearsal of a cluster job script on this machine (docs/cluster.md):

    make cluster-rehearsal SCHEDULER=slurm|pbs|uge [SCRIPT=job.sh] [ARGS="k=v ..."]
    python tests/cluster/rehearsal.py --scheduler pbs [--script job.sh] [k=v ...]

Starts the two namespace nodes (node1, node2: tests/cluster/netns.py) and, for Slurm,
a slurmctld with one slurmd per node; renders ``yasgd jobs render --scheduler S
--nodes 2 --gpus-per-node 1 --config examples/configs/tiny.yaml`` (or takes
``--script``, a script rendered for 2 nodes); runs it as the scheduler would
(PBS/UGE: their environment on node1, hosts node1 and node2; Slurm: ``sbatch -N 2``);
prints where its run directory is and its exit status; removes everything it started,
also on failure or Ctrl-C, and checks that nothing is left. Root only (namespaces).
The run directory stays, under ``--runs`` (default runs/rehearsal).
"""
from __future__ import annotations

import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import netns  # noqa: E402
from common import CONFIG, REPO, job_env  # noqa: E402
from schedulers import render, run_slurm, start_pbs, start_uge  # noqa: E402

from yasgd import UsageError, config_text, usage, writable  # noqa: E402


def main(argv=None) -> int:
    ap = usage.Parser(prog="python tests/cluster/rehearsal.py", name="cluster-rehearsal",
                      description=__doc__.split("\n\n")[0])
    ap.add_argument("--scheduler", required=True, choices=["slurm", "pbs", "uge"])
    ap.add_argument("--script", help="a job script rendered for 2 nodes (default: render one)")
    ap.add_argument("--config", default=os.path.join(REPO, CONFIG),
                    help=f"config to render (default {CONFIG} of this checkout)")
    ap.add_argument("--runs", default=os.path.join(REPO, "runs", "rehearsal"),
                    help="parent of the job's run directory")
    ap.add_argument("--timeout", type=float, default=600, help="seconds the job may take")
    ap.add_argument("overrides", nargs="*", help="section.key=value for the training")
    a = ap.parse_args(argv)
    # what the user named, checked before any namespace, daemon or folder is made
    bad = ([f"--script {a.script or repr(a.script)} is not a file"]
           if a.script is not None and not os.path.isfile(a.script) else []) + \
        ([f"--config {a.config} is not a file"]
         if a.script is None and not os.path.isfile(a.config) else []) + \
        ([f"--timeout must be a finite number of seconds > 0, got {a.timeout}"]
         if not (0 < a.timeout < float("inf")) else []) + \
        [f"--runs {a.runs}: {p}" for p in [writable.dir_problem(a.runs)] if p]
    if bad:
        return ap.fail(bad[0])
    try:     # the overrides (and the config they apply to) as the job will read them; a
        if a.script is None:        # script's own config is known only to the script
            config_text.load(a.config, a.overrides)
        else:
            config_text.check_overrides(a.overrides)
    except UsageError as e:
        return ap.fail(e)
    reason = netns.unavailable()
    if reason:
        return ap.fail(f"cannot run here: {reason}")
    runs = os.path.abspath(a.runs)
    os.makedirs(runs, exist_ok=True)
    work = os.path.join(runs, f".{a.scheduler}-{time.strftime('%Y%m%d-%H%M%S')}")
    os.makedirs(work)
    script = os.path.abspath(a.script) if a.script else render(
        a.scheduler, os.path.join(work, "job.sbatch" if a.scheduler == "slurm" else "job.sh"),
        a.config)
    t0 = time.time()
    status, out = 1, ""
    with netns.Cluster() as c:
        print(f"cluster-rehearsal: node1 ({netns.address('node1')}) + node2 "
              f"({netns.address('node2')}) up; {a.scheduler} script {script}", flush=True)
        env = job_env(c, runs, YASGD_CONFIG=a.config, YASGD_ARGS=" ".join(a.overrides))
        if a.script:   # the script's own (rendered) config
            env.pop("YASGD_CONFIG")
        if a.scheduler == "slurm":
            import slurm_cluster
            s = slurm_cluster.TwoNodeSlurm(c)
            try:
                s.start()
                job, state, status, out = run_slurm(s, script, work, env, timeout=a.timeout)
                print(f"cluster-rehearsal: slurm job {job}: {state}", flush=True)
            finally:
                s.stop()
        else:
            jobid = f"rehearsal{os.getpid()}"
            start = start_pbs if a.scheduler == "pbs" else start_uge
            job = start(c, script, work, env, f"{jobid}.pbs" if a.scheduler == "pbs" else jobid)
            try:
                status = job.wait(timeout=a.timeout)
            finally:
                if job.proc.poll() is None:
                    job.kill()
            out = job.output
    sys.stdout.write(out)
    left = netns.leftovers()
    m = re.findall(r"run directory: (\S+)", out)
    print(f"cluster-rehearsal: {a.scheduler} job across node1 + node2 exited with status "
          f"{status} after {time.time() - t0:.0f} s; run directory: "
          f"{m[-1] if m else '(none)'}; cleaned up: {'yes' if not left else left}")
    return status if not left else (status or 1)


if __name__ == "__main__":
    sys.exit(main())
