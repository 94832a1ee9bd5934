"""The only argparse in yasgd: ``yasgd train | data | jobs | simulate | bench | provenance``.

Every subcommand turns its arguments into explicit keyword arguments of a library
function. A :class:`yasgd.UsageError` becomes one line on stderr and exit status 2;
a training error (non-finite loss, unusable checkpoint) one line and status 1; a
run stopped by SIGTERM (checkpoint written) one line and status 143.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import List, Optional

from yasgd import UsageError

BENCHES = ("optimizer", "allreduce", "init", "throughput", "data", "largebatch", "overlap")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="yasgd", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train from a YAML config (1 rank, or N under mpirun/horovodrun)")
    t.add_argument("config", help="YAML config file (see examples/configs/)")
    t.add_argument("overrides", nargs="*", metavar="section.key=value")

    c = sub.add_parser("check-config", help="load and validate a config for a world size, print it resolved")
    c.add_argument("config")
    c.add_argument("overrides", nargs="*", metavar="section.key=value")
    c.add_argument("--world-size", type=int, default=1)

    d = sub.add_parser("data", help="dataset tools")
    dsub = d.add_subparsers(dest="data_command", required=True)
    r = dsub.add_parser("im2rec", help="ImageNet-layout folder -> train/val RecordIO")
    r.add_argument("src", help="folder with train/<class>/*.JPEG and val/<class>/*.JPEG")
    r.add_argument("dst", help="output folder for train.rec/.idx, val.rec/.idx, classes.txt")
    r.add_argument("--resize", type=int, default=256, help="shorter side in pixels (0 = keep)")
    r.add_argument("--quality", type=int, default=95, help="JPEG quality")
    r.add_argument("--workers", type=int, default=2)
    r.add_argument("--verify", action="store_true", help="read every record back")
    r.add_argument("--no-progress", action="store_true")
    v = dsub.add_parser("verify", help="read every record of a .rec/.idx pair back")
    v.add_argument("prefix", help="path without extension, e.g. data/train")

    j = sub.add_parser("jobs", help="cluster job scripts")
    jsub = j.add_subparsers(dest="jobs_command", required=True)
    for name in ("render", "submit"):
        jr = jsub.add_parser(name, help=f"{name} a job script for a scheduler")
        jr.add_argument("--scheduler", choices=("pbs", "uge", "slurm"), required=True)
        jr.add_argument("--nodes", type=int, required=True)
        jr.add_argument("--gpus-per-node", type=int, default=None)
        jr.add_argument("--config", required=True)
        jr.add_argument("--walltime", default=None)
        jr.add_argument("--group", default=None)
        jr.add_argument("--queue", default=None)
        jr.add_argument("--output", "-o", default=None, help="write the script here (default: stdout)")
        jr.add_argument("--dry-run", action="store_true", help="print what would be submitted")
        jr.add_argument("overrides", nargs="*", metavar="section.key=value")

    s = sub.add_parser("simulate", help="scaling model of synchronous data-parallel training")
    s.add_argument("--preset", default="abci2019")
    s.add_argument("--gpus", type=int, default=2048)
    s.add_argument("--batch", type=int, default=81920, help="global mini-batch")
    s.add_argument("--epochs", type=float, default=90)
    s.add_argument("--images-per-gpu-s", type=float, default=None,
                   help="per-GPU compute throughput (default: the preset's)")
    s.add_argument("--budget-bytes", type=int, default=None, help="allreduce group budget")
    s.add_argument("--plot", default=None, help="write a PNG of efficiency against GPUs and budget")
    s.add_argument("--json", default=None, help="write the prediction as JSON")

    b = sub.add_parser("bench", help="benchmarks (make bench-*)")
    b.add_argument("name", choices=BENCHES)
    b.add_argument("--out", default="results")
    b.add_argument("--quick", action="store_true", help="fewer repetitions (smoke run)")

    pv = sub.add_parser("provenance", help="write provenance.json (environment, versions, git, hosts)")
    pv.add_argument("run_dir")
    pv.add_argument("--hostfile", default=None)
    return p


def _run(args: argparse.Namespace) -> int:
    if args.command == "train":
        from yasgd import config as config_mod
        from yasgd.train import run_from_config
        cfg = config_mod.load(args.config, args.overrides)
        result = run_from_config(cfg)
        return 0 if result is not None else 1
    if args.command == "check-config":
        from yasgd import config as config_mod
        cfg = config_mod.load(args.config, args.overrides)
        per_rank = config_mod.per_rank_batch(cfg, args.world_size)
        import yaml
        print(yaml.safe_dump(cfg.to_dict(), sort_keys=False), end="")
        print(f"# per-rank batch at world size {args.world_size}: {per_rank}")
        return 0
    if args.command == "data":
        from yasgd.data import im2rec
        if args.data_command == "im2rec":
            info = im2rec.convert(args.src, args.dst, resize=args.resize, quality=args.quality,
                                  workers=args.workers, verify=args.verify,
                                  progress=not args.no_progress)
            print(json.dumps(info, indent=1))
            return 0
        n = im2rec.verify(args.prefix)
        print(f"{args.prefix}: {n} records ok")
        return 0
    if args.command == "jobs":
        from yasgd import jobs
        script = jobs.render(scheduler=args.scheduler, nodes=args.nodes,
                             gpus_per_node=args.gpus_per_node, config=args.config,
                             walltime=args.walltime, group=args.group, queue=args.queue,
                             overrides=args.overrides)
        if args.jobs_command == "render":
            if args.output:
                with open(args.output, "w") as f:
                    f.write(script)
            else:
                sys.stdout.write(script)
            return 0
        return jobs.submit(script, scheduler=args.scheduler, output=args.output, dry_run=args.dry_run)
    if args.command == "simulate":
        from yasgd import simulate
        report = simulate.report(preset=args.preset, gpus=args.gpus, batch=args.batch,
                                 epochs=args.epochs, images_per_gpu_s=args.images_per_gpu_s,
                                 budget_bytes=args.budget_bytes, plot=args.plot,
                                 json_out=args.json)
        print(report)
        return 0
    if args.command == "bench":
        import importlib
        mod = importlib.import_module(f"yasgd.bench.{args.name}")
        mod.run(out_dir=args.out, quick=args.quick)
        return 0
    if args.command == "provenance":
        from yasgd import provenance
        path = provenance.write(args.run_dir, hostfile=args.hostfile)
        print(path)
        return 0
    raise AssertionError(args.command)


def main(argv: Optional[List[str]] = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except UsageError as e:
        print(f"yasgd: error: {e}", file=sys.stderr)
        return 2
    except Exception as e:
        from yasgd.checkpoint import CheckpointError
        from yasgd.faults import TERM_EXIT_STATUS, Terminated
        from yasgd.train import TrainingError
        if isinstance(e, Terminated):   # one write per line: ranks share mpirun's stderr
            sys.stderr.write(f"yasgd: {e}\n")
            return TERM_EXIT_STATUS
        if isinstance(e, (TrainingError, CheckpointError)):
            sys.stderr.write(f"yasgd: error: {e}\n")
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
