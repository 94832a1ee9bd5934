"""The ``yasgd`` command: ``yasgd train | check-config | launch | data | jobs | simulate |
bench | provenance`` (``yasgd launch`` is :func:`yasgd.launch.main`, which keeps its own
parser so that ``python -m yasgd.launch`` works without this module). Its parser is
:func:`yasgd.cli_args.parser`; it, the launcher's and the maintainers' ``python -m`` tools'
are :class:`yasgd.usage.Parser`.

Every subcommand turns its arguments into explicit keyword arguments of a library
function. A :class:`yasgd.UsageError` becomes one line on stderr and exit status 2;
a training error (non-finite loss, unusable checkpoint) one line and status 1; a
run stopped by SIGTERM (checkpoint written) one line and status 143; a failed ``yasgd
preflight`` check (the node, the build or the network) one line and status 3. What ``yasgd
--help`` tells users is in :mod:`yasgd.cli_args`.
"""
from __future__ import annotations

from yasgd.importing import ctrl_c_ends_imports

with ctrl_c_ends_imports():          # until main() reports a Ctrl-C itself
    import argparse
    import errno
    import json
    import os
    import signal
    import sys
    from typing import List, Optional

    from yasgd import UsageError, argtypes, config_device, config_text, usage
    from yasgd.cli_args import BENCHES, STUDY_BENCHES, SIMULATE_DEFAULTS, parser as _parser

__all__ = ["BENCHES", "STUDY_BENCHES", "main", "parse"]
STAMP = "YYYYmmdd-HHMMSS"       # as wide as the time stamp of a run's folder (yasgd.train)


def _close_horovod_timeline() -> None:
    """Write out the rest of a Horovod timeline (``HOROVOD_TIMELINE``): Horovod's exit hook
    stops its writer without draining its queue; ``stop_timeline()`` writes every queued event."""
    from yasgd import dist
    w = dist.current()
    if w is None or not w.horovod or not os.environ.get("HOROVOD_TIMELINE"):
        return
    import horovod.mxnet as hvd
    if hvd.is_initialized():
        hvd.stop_timeline()


def parse(argv: List[str]) -> argparse.Namespace:
    """``argv`` (after ``yasgd``) parsed, or SystemExit: 0 after --help, 2 after the one
    usage-error line (also what ``yasgd launch`` checks a training's arguments with)."""
    return _parser().parse_args(argv)


def _run(args: argparse.Namespace) -> int:
    if args.command in ("train", "preflight", "bench"):   # they start MXNet and Horovod
        from yasgd.envcheck import problem
        bad_env = problem()
        if bad_env:
            raise UsageError(bad_env)
    if getattr(args, "config", None):
        argtypes.check_config_file(args.config)
        config_text.check_no_yaml_alias(args.config)
        config_text.check_overrides(getattr(args, "overrides", None) or ())
    if args.command == "train":
        import yasgd.data.fit as fit, yasgd.faults as faults, yasgd.supervise as supervise
        faults.install_stop_handlers()   # before any work: Ctrl-C never ends in a traceback,
        supervise.keep_stops(faults.Interrupted)    # nor is lost where it lands (an import)
        cfg = config_text.load(args.config, args.overrides)
        config_device.check_training(cfg)               # the rules on the ranks' device
        _check_run_dir(cfg, and_resume=False)           # before Horovod; whole
        fit.check(cfg)
        config_text.flush()                             # every check passed: its warnings
        from yasgd.train import run_from_config
        try:
            result = run_from_config(cfg)
        finally:
            _close_horovod_timeline()
        return 0 if result is not None else 1
    if args.command == "check-config":
        from yasgd import config as config_mod
        cfg = config_text.load(args.config, args.overrides)
        per_rank = config_mod.per_rank_batch(cfg, args.world_size)
        device = args.device if args.device != "auto" else config_device.host_device()
        config_device.check(cfg, device, args.world_size, args.ranks_on_host)
        if args.run_dir:
            _check_run_dir(cfg)
        if args.data:
            import yasgd.data as data, yasgd.data.fit as fit
            data.check_data(cfg)
            fit.check(cfg)
        import yaml
        print(yaml.safe_dump(cfg.to_dict(), sort_keys=False), end="")
        print(f"# per-rank batch at world size {args.world_size}: {per_rank}")
        print(f"# device: {device}; BN + ReLU fused: "
              f"{str(config_mod.fused_bn_relu(cfg, device)).lower()}")
        return 0
    if args.command == "data":
        from yasgd.data import im2rec
        try:
            if args.data_command == "im2rec":
                info = im2rec.convert(args.src, args.dst, resize=args.resize,
                                      quality=args.quality, workers=args.workers,
                                      verify=args.verify, progress=not args.no_progress)
                print(json.dumps(info, indent=1))
                return 0
            n = im2rec.verify(args.prefix, headers_only=args.headers_only, threads=args.threads)
        except im2rec.DamagedRecords as e:  # damaged data is a finding (1), not a usage error (2)
            usage.error("", e)
            return 1
        print(f"{args.prefix}: {n} records ok" + (" (headers only)" if args.headers_only else ""))
        return 0
    if args.command == "jobs":
        from yasgd import jobs
        script = jobs.render(scheduler=args.scheduler, nodes=args.nodes,
                             gpus_per_node=args.gpus_per_node, config=args.config,
                             walltime=args.walltime, group=args.group, queue=args.queue,
                             overrides=args.overrides)
        if args.jobs_command == "render":
            # -o: a file, or DIR/job.sh (job.sbatch) in a directory; checked before writing.
            path = None if args.output is None else jobs.output_path(args.output, args.scheduler)
            jobs.write_script(script, path)
            if path is not None and path != args.output:
                print(f"yasgd: wrote {path}", file=sys.stderr)
            return 0
        return jobs.submit(script, scheduler=args.scheduler, output=args.output, dry_run=args.dry_run)
    if args.command == "simulate":
        from yasgd import simulate
        # --validate and --preset list print one table each and read no other option
        alone, own = (("--validate", None) if args.validate else
                      ("--preset list", "preset") if args.preset == "list" else (None, None))
        if alone:
            given = [k for k in SIMULATE_DEFAULTS if k in args.typed and k != own]
            if given:
                raise UsageError(f"simulate {alone} takes no other argument, got --"
                                 + given[0].replace("_", "-"))
        if args.validate:
            from yasgd.simulate import validate
            print(validate.table())
            return 0
        if args.preset != "list":
            simulate.get_preset(args.preset)    # UsageError: one line, exit 2
        print(simulate.report(preset=args.preset, gpus=args.gpus, batch=args.batch,
                              epochs=args.epochs, images_per_gpu_s=args.images_per_gpu_s,
                              budget_bytes=args.budget_bytes, plot=args.plot,
                              json_out=args.json))
        return 0
    if args.command == "bench":
        import importlib
        from yasgd import outputs
        outputs.check_dir(args.out, "bench --out")
        study = {k: getattr(args, k) for k in ("jobs", "arms", "max_runs", "stop_after", "cache")
                 if getattr(args, k) is not None}
        if study and args.name not in STUDY_BENCHES:
            raise UsageError(f"bench {args.name}: --{next(iter(study)).replace('_', '-')} "
                             f"applies to bench {' and '.join(STUDY_BENCHES)} only")
        if "arms" in study:
            from yasgd.bench.study_plan import arm_names
            study["arms"] = arm_names(study["arms"])
        mod = importlib.import_module(f"yasgd.bench.{args.name}")
        from yasgd.bench import output
        output.check_paths(args.name, args.out, mod.plots(args.quick), output.study_folders(
            args.out, study.get("cache")) if args.name in STUDY_BENCHES else ())
        mod.run(out_dir=args.out, quick=args.quick, **study)
        return 0
    if args.command == "preflight":
        from yasgd import preflight
        return preflight.main(timeout_s=args.timeout)
    if args.command == "provenance":
        from yasgd import outputs, provenance
        outputs.check_dir(args.run_dir, "provenance RUN_DIR")
        if args.hostfile is not None:
            argtypes.check_hostfile(args.hostfile, "provenance --hostfile")
        os.makedirs(args.run_dir, exist_ok=True)
        path = os.path.join(args.run_dir, "provenance.json")
        if os.path.lexists(path):       # a run's record (a training's: world size and all)
            raise UsageError(f"provenance: {path} exists; a run directory's provenance is "
                             f"written once (name a new RUN_DIR)")
        outputs.write_json(path, provenance.collect(hostfile=args.hostfile))
        print(path)
        return 0
    raise AssertionError(args.command)


def _check_run_dir(cfg, and_resume: bool = True) -> None:
    """Train's checks, before any rank starts, of run.dir (held whole: its probe; and the
    names of the run's folder in it, run.name and a time stamp) and of the checkpoint
    run.resume chooses (it verifies, and was written under this config)."""
    from yasgd import config as config_mod, outputs, resume
    if cfg.run.dir and cfg.run.resume in ("none", "", "auto"):
        problem = outputs.name_problem(os.path.join(cfg.run.dir, f"{cfg.run.name}-{STAMP}"))
        if problem:
            raise UsageError(f"config key run.dir={cfg.run.dir}: the run's folder "
                             f"{cfg.run.name}-{STAMP} cannot be made in it: {problem}")
    outputs.checked(config_mod.check_run_dir, cfg)
    plan = resume.find_resume(cfg) if cfg.run.dir and and_resume else None
    if plan is not None and plan.first is not None:
        resume.check_config(plan.first[0], cfg, plan.candidates[0])


def main(argv: Optional[List[str]] = None) -> int:
    try:    # a pipe closed, a full disk: one line, not a traceback (as every python -m tool)
        return usage.run(lambda: _main(sys.argv[1:] if argv is None else list(argv)))
    except KeyboardInterrupt as e:
        # Ctrl-C while parsing, or any stop signal to a command but train (supervise.Stopped)
        signum = getattr(e, "signum", signal.SIGINT)
        sys.stderr.write("yasgd: interrupted\n" if signum == signal.SIGINT else
                         f"yasgd: stopped by {signal.Signals(signum).name}\n")
        return 128 + signum


#: what an OSError says where the user's own files are not the command's to read or write
_NOT_ALLOWED = (errno.EACCES, errno.EPERM, errno.EROFS)


def _main(argv: List[str]) -> int:
    if argv[:1] == ["launch"]:
        from yasgd import launch
        try:
            return launch.main(argv[1:], prog="yasgd launch")
        except SystemExit as e:   # --help (0), a usage error (2), common.sh not sourced (1)
            if isinstance(e.code, int) or e.code is None:
                return e.code or 0
            print(e.code, file=sys.stderr)
            return 1
    try:
        args = parse(argv)
    except SystemExit as e:                 # --help (0) or a usage error, already printed (2)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    if args.command != "train":     # train's ranks stop at a step, with a checkpoint
        from yasgd.supervise import stop_by_unwinding
        stop_by_unwinding()
    try:
        status = _run(args)
        config_text.flush()             # after the checks of a command that passed them
        return status
    except UsageError as e:
        return usage.error("", e)        # one line, whatever the message holds (a path's newline)
    except BaseException as caught:
        from yasgd import dropped_stops
        e = dropped_stops.cause(caught)     # a stop dropped on its way, not the error after it
        if isinstance(e, KeyboardInterrupt):
            raise e                         # main() reports it
        from yasgd import faults
        if isinstance(e, (faults.Terminated, faults.Interrupted)):
            return faults.report_stop(e)
        if not isinstance(e, Exception):
            raise
        if isinstance(e, OSError) and e.errno in _NOT_ALLOWED and e.filename:
            # a file or folder of the user's that this user may not read or write (a
            # checkpoint, a dataset, a run folder): its name, not a traceback
            return usage.error("", f"{e.filename}: {e.strerror}")
        import yasgd.checkpoint as checkpoint, yasgd.train as train
        if isinstance(e, (train.TrainingError, checkpoint.CheckpointError)):
            usage.error("", e)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
