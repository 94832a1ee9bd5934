"""Faults between the nodes of a job under mpirun over ssh (the PBS script,
jobs/abci/pbs/train.sh, its environment faked, node1 and node2 real):

(a) node loss: every process of the job on node2 (its rank and mpirun's daemon,
    orted; not the node's sshd) killed mid-epoch -> the job exits non-zero within
    60 s naming the lost rank or host, and the job's own mpirun line (command.sh)
    with run.resume=auto completes on both nodes;
(c) a network partition: the veth taken down in node1 mid-epoch -> the stall watchdog
    (run.stall_timeout_s=15) ends the job within 15 + 30 s, no process left on either
    node;
(d) a link flap: the veth down for 3.5 s (under a quarter of the stall timeout), then
    up -> TCP retransmits, the run continues and finishes, no stall.

Every run: tiny.yaml on 1,024 Fashion-MNIST images, 4 steps an epoch, a checkpoint
per epoch, many epochs, so that it is interrupted in the middle.
"""
import os
import shlex
import signal
import sys
import time

from common import REPO, Job, describe, job_dir_of, job_env, job_processes, steps, train_dirs, \
    wait_until
from netns import NODES
from schedulers import SCRIPTS, start_pbs

sys.path.insert(0, REPO)
from yasgd import checkpoint  # noqa: E402

SPE = 4                 # steps per epoch
STALL_S = 15            # run.stall_timeout_s of (c) and (d)
PBS = os.path.join(REPO, SCRIPTS["pbs"])


def long_run(data_root, *extra):
    return " ".join([f"data.root={data_root}", "data.limit=0", "train.epochs=60",
                     "train.max_steps=0", "train.checkpoint_every=1", "train.keep_checkpoints=3",
                     "train.eval_every=100", "optim.lr=0.5", "train.log_interval=2", *extra])


def comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def start(cluster, tmp_path, jobs, jobid, args, **env) -> tuple:
    runs = str(tmp_path / "runs")
    job = start_pbs(cluster, PBS, str(tmp_path), job_env(cluster, runs, YASGD_ARGS=args, **env),
                    jobid)
    jobs.append(job)
    wait_until(lambda: os.path.isdir(runs) and any(d.endswith(jobid) for d in os.listdir(runs)),
               60, "the job's run directory")
    return job, job_dir_of(runs, "pbs", jobid)


def mid_epoch_3(job, job_dir):
    wait_until(lambda: any(s >= 2 * SPE + 1 for s in steps(job_dir)) or job.proc.poll() is not None,
               150, "epoch 3", poll=0.05)
    assert job.proc.poll() is None, job.tail()


def nothing_left(cluster, within: float) -> None:
    wait_until(lambda: not any(job_processes(cluster, n) for n in NODES), within,
               "no job process on either node")


# -- (a) node loss under mpirun -----------------------------------------------------------
def test_a_node_loss_under_mpirun_then_resume(cluster, data_root, tmp_path, jobs):
    job, job_dir = start(cluster, tmp_path, jobs, "a.pbs1", long_run(data_root))
    mid_epoch_3(job, job_dir)
    victims = [p for p in job_processes(cluster, "node2") if comm(p) != "sshd"]
    names = describe(victims)
    assert any("yasgd.cli train" in n for n in names) and any("orted" in n for n in names), names
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    t_kill = time.time()
    rc = job.wait(timeout=120)
    took = time.time() - t_kill
    out = job.output
    assert rc != 0, out[-4000:]
    assert took < 60, f"the job needed {took:.0f} s to end after node2 was lost"
    lost = [line.strip() for line in out.splitlines()
            if ("node2" in line or "rank 1" in line) and ("mpirun" in line or "daemon" in line
                                                          or "ORTE" in line)]
    assert lost, out[-4000:]
    nothing_left(cluster, 15)
    # resume: the job's own mpirun line, across both nodes again
    train_dir = train_dirs(job_dir)[0]
    ckpt = checkpoint.latest_valid(train_dir)
    assert ckpt is not None, out[-4000:]
    done = checkpoint.validate(ckpt)["step"]
    with open(os.path.join(job_dir, "command.sh")) as f:
        cmd = shlex.split(f.read())
    assert cmd[0] == "mpirun" and "--hostfile" in cmd
    resumed = Job(cluster, "node1", cmd + ["run.resume=auto", f"train.max_steps={done + 2 * SPE}"],
                  cwd=REPO, env=job_env(cluster, str(tmp_path / "runs")),
                  out=str(tmp_path / "resumed.out"))
    jobs.append(resumed)
    assert resumed.wait() == 0, resumed.tail()
    rout = resumed.output
    assert f"resumed from {ckpt}" in rout, rout[-4000:]
    assert "[bind] rank 0 local 0/1 on node1" in rout and "[bind] rank 1 local 0/1 on node2" in rout
    from common import events
    end = events(train_dir)[-1]
    assert end["event"] == "end" and end["steps"] == done + 2 * SPE, end
    nothing_left(cluster, 15)
    print(f"\n(a) mpirun over ssh: node2's rank + orted SIGKILLed; job exit {rc} after "
          f"{took:.1f} s: {lost[0]!r}; resumed from step {done} on node1 + node2 to step "
          f"{done + 2 * SPE} ({resumed.seconds:.1f} s)")


# -- (c) a partition: the watchdog ends the job -------------------------------------------
def test_c_partition_ends_job_by_stall_watchdog(cluster, data_root, tmp_path, jobs):
    """The job's end after the link is cut: the watchdog fires on both ranks (15 s) and
    each calls MPI_Abort, which ends the rank; mpirun and node2's orted then wait until
    TCP gives up on each other (12.6 s: tcp_retries2=5) plus OpenMPI's kill delay
    twice over (odls_base_sigkill_timeout, 2 s here: the job scripts' default of 10 s
    is there for a SIGTERM checkpoint, which a partitioned job cannot write)."""
    job, job_dir = start(cluster, tmp_path, jobs, "c.pbs1",
                         long_run(data_root, f"run.stall_timeout_s={STALL_S}"),
                         OMPI_MCA_odls_base_sigkill_timeout="2")
    mid_epoch_3(job, job_dir)
    cluster.link("node1", up=False)
    t_down = time.time()
    try:
        rc = job.wait(timeout=STALL_S + 30 + 60)
        took = time.time() - t_down
        out = job.output
        left = {n: describe(job_processes(cluster, n)) for n in NODES}
        # what remains of the job ends within the same bound (node2 may still be finishing)
        wait_until(lambda: not any(job_processes(cluster, n) for n in NODES),
                   max(1.0, STALL_S + 30 - (time.time() - t_down)), f"no job process ({left})")
        all_gone = time.time() - t_down
    finally:
        cluster.link("node1", up=True)
    assert rc != 0, out[-4000:]
    stall = [line for line in out.splitlines() if "yasgd: error: stall: rank 0 on node1" in line]
    assert len(stall) == 1, out[-4000:]
    assert took <= STALL_S + 30, f"{took:.1f} s"
    assert all_gone <= STALL_S + 30, f"{all_gone:.1f} s"
    print(f"\n(c) mpirun over ssh, veth down in node1: job exit {rc} {took:.1f} s after the "
          f"link went down, nothing left on either node after {all_gone:.1f} s "
          f"(limit {STALL_S} + 30 s): {stall[0][:200]}")


# -- (d) a short flap: the run goes on -----------------------------------------------------
def test_d_link_flap_is_survived(cluster, data_root, tmp_path, jobs):
    total = 6 * SPE
    job, job_dir = start(cluster, tmp_path, jobs, "d.pbs1",
                         long_run(data_root, f"run.stall_timeout_s={STALL_S}",
                                  f"train.max_steps={total}"))
    mid_epoch_3(job, job_dir)
    down_s = STALL_S / 4 - 0.25
    cluster.link("node1", up=False)
    time.sleep(down_s)
    cluster.link("node1", up=True)
    rc = job.wait()
    out = job.output
    assert rc == 0, out[-4000:]
    assert "yasgd: error: stall" not in out, out[-4000:]
    from common import events
    end = events(train_dirs(job_dir)[0])[-1]
    assert end["event"] == "end" and end["steps"] == total, end
    nothing_left(cluster, 15)
    print(f"\n(d) mpirun over ssh, veth down {down_s:.2f} s (stall timeout {STALL_S} s): "
          f"the run finished all {total} steps, exit 0 ({job.seconds:.1f} s)")
