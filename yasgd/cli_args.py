"""The ``yasgd`` command's arguments: its parser, what ``yasgd --help`` and every ``yasgd
COMMAND --help`` say, and the defaults the commands read (:data:`SIMULATE_DEFAULTS`). Every
argument has a help line that says what it is, its unit and its default
(tests/unit/test_cli_face.py walks the parser and checks that none lacks one).
"""
from __future__ import annotations

import argparse
import textwrap

from yasgd import argtypes, usage

BENCHES = ("optimizer", "allreduce", "init", "throughput", "data", "largebatch", "overlap",
           "ablation")
STUDY_BENCHES = ("largebatch", "ablation")   # the cached training studies

DESCRIPTION = """\
yasgd trains ResNet-50 at large mini-batches with LARS, data-parallel over MPI ranks
(MXNet Gluon + Horovod): a reproduction of Fujitsu's "Yet Another Accelerated SGD"
(Yamazaki et al., 2019). A run is one YAML config plus section.key=value overrides,
checked before any work starts; bad input stops with one "yasgd: error:" line and
exit status 2."""

EPILOG = """\
examples:
  yasgd check-config examples/configs/demo.yaml --world-size 2
  yasgd train examples/configs/demo.yaml                        # one rank
  yasgd launch -np 2 -- yasgd train examples/configs/demo.yaml  # two ranks on this host

"yasgd COMMAND --help" describes a command. README.md has the quick start, the
deviations from the paper and the file map; docs/ covers clusters and job scripts,
data preparation, operations (checkpoints, resume, signals), benchmarks, large-batch
training, the scaling model and the design."""

LAUNCH_USAGE = "yasgd launch -np N [--timeout S] [--gloo] ... -- COMMAND"
OVERRIDES = "section.key=value"
OVERRIDES_HELP = ("config keys to override, e.g. train.global_batch=512 optim.lr=3.2 "
                  "(`yasgd check-config CONFIG` prints every key)")

#: what ``yasgd bench NAME`` runs (docs/benchmarks.md has the method and the records)
BENCH_HELP = {
    "optimizer": "one LARS step over ResNet-50's tensors: yasgd's fused operator, per "
                 "layer, MXNet's lars",
    "allreduce": "summing ResNet-50's gradients on 2 ranks: per tensor, yasgd's groups, "
                 "one flat buffer",
    "init": "parallel parameter initialization vs. init + broadcast, 2 ranks",
    "throughput": "ResNet-50 images/s of yasgd's step vs. Horovod's example loop",
    "data": "decode + augment images/s of the data loaders",
    "largebatch": "SGD vs. yasgd's recipe at batch 256-16K, seeds and LR grids (hours; "
                  "cached, resumable)",
    "overlap": "a 2-rank step with allreduce issued right after backward vs. after it",
    "ablation": "what each of the paper's techniques buys at 8K (hours; cached, resumable)",
}

SIMULATE_DEFAULTS = {"preset": "abci2019", "gpus": 2048, "batch": 81920, "epochs": 90,
                     "images_per_gpu_s": None, "budget_bytes": None, "plot": None,
                     "json": None}

class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions wrapped to the help's width, as argparse's default does; the epilog's
    lines (examples, lists) kept as written."""

    def add_text(self, text):
        if text and text is not argparse.SUPPRESS and not text.startswith(("examples:",
                                                                            "benchmarks:")):
            width = max(self._width - self._current_indent, 11)
            text = "\n\n".join(textwrap.fill(" ".join(par.split()), width)
                               for par in text.split("\n\n") if par.strip())
        super().add_text(text)


_RAW = _Formatter


class _Parser(usage.Parser):
    """The one-line usage errors of :mod:`yasgd.usage`; argparse names every positional left
    unfilled, the optional overrides too, which the line leaves out."""

    hidden = (f", {OVERRIDES}",)


def _path(text: str) -> str:
    """A file or folder argument: any path but the empty one (read as "here" or as none)."""
    if not text:
        raise argparse.ArgumentTypeError("must be a path, got ''")
    return text


class _Typed(argparse.Action):
    """Store the value, as argparse's own action does, and add the option's name to
    ``namespace.typed``. argparse calls an action only for an option on the command line
    (``--gpus 8``, ``--gpus=8`` or an abbreviation, ``--gp 8``), never for a default, so
    ``simulate --validate`` and ``--preset list`` can refuse every option typed with them,
    one typed with its default value included."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        namespace.typed = (*getattr(namespace, "typed", ()), self.dest)


def _examples(*lines: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


def _config_and_overrides(p) -> None:
    """A config file and the overrides after it: train's and check-config's positionals."""
    p.add_argument("config", type=_path, help="YAML config file (see examples/configs/)")
    p.add_argument("overrides", nargs="*", metavar=OVERRIDES, help=OVERRIDES_HELP)


def _train_parsers(sub) -> None:
    t = sub.add_parser(
        "train", help="train from a YAML config (1 rank, or N under mpirun/horovodrun)",
        description="Train ResNet from a YAML config plus overrides, on one rank or on every "
                    "rank of mpirun, horovodrun or srun. Every check runs before the first "
                    "step; a run writes its folder (run.dir/run.name-TIME) with the resolved "
                    "config, metrics.jsonl and its checkpoints. SIGINT or SIGTERM stops it at "
                    "the next step with a checkpoint (docs/operations.md).",
        epilog=_examples("yasgd train examples/configs/demo.yaml train.epochs=5",
                         "yasgd launch -np 2 -- yasgd train examples/configs/demo.yaml",
                         "mpirun -np 8 yasgd train examples/configs/demo.yaml  # a cluster "
                         "node"),
        formatter_class=_RAW)
    _config_and_overrides(t)

    c = sub.add_parser(
        "check-config", help="load and validate a config for a world size, print it resolved",
        description="Load a config with its overrides, apply every check train applies to it "
                    "for the given world size and device, and print it resolved (every key, "
                    "defaults filled in) with the per-rank batch. Nothing is trained.",
        epilog=_examples("yasgd check-config examples/configs/paper.yaml --world-size 2048 "
                         "--device gpu",
                         "yasgd check-config examples/configs/demo.yaml --world-size 8 "
                         "train.epochs=5"),
        formatter_class=_RAW)
    _config_and_overrides(c)
    c.add_argument("--world-size", type=argtypes.integer(1), default=1, metavar="N",
                   help="ranks of the job the config is checked for (default: 1)")
    c.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto",
                   help="what the ranks compute on, for the rules that depend on it "
                        "(auto, the default: gpu where nvidia-smi lists GPUs on this host, "
                        "else cpu)")
    c.add_argument("--data", action="store_true",
                   help="also check that the dataset the config names is on this host (what "
                        "train checks before it starts; yasgd launch asks for it)")
    c.add_argument("--run-dir", action="store_true", help="also check run.dir and the checkpoint "
                   "run.resume chooses on this host (train's checks; yasgd launch asks for them)")
    c.add_argument("--ranks-on-host", type=argtypes.integer(1), metavar="N", help="also check "
                   "that N CPU ranks fit this host's memory (train's check; launch passes -np)")


def _data_parsers(sub) -> None:
    d = sub.add_parser("data", help="dataset tools",
                       description="Convert an ImageNet-layout folder to RecordIO, or check "
                                   "a RecordIO pair (docs/data.md).")
    dsub = d.add_subparsers(dest="data_command", required=True, metavar="command")
    r = dsub.add_parser("im2rec", help="ImageNet-layout folder -> train/val RecordIO",
                        description="Encode SRC/train and SRC/val (one folder per class) into "
                                    "DST/train.rec and DST/val.rec with their .idx, .digests "
                                    "and classes.txt.",
                        epilog=_examples("yasgd data im2rec /data/imagenet data --verify"),
                        formatter_class=_RAW)
    r.add_argument("src", type=_path,
                   help="folder with train/<class>/*.JPEG and val/<class>/*.JPEG")
    r.add_argument("dst", type=_path,
                   help="output folder for train/val .rec/.idx/.digests, classes.txt")
    r.add_argument("--resize", type=argtypes.integer(0, "pixels"), default=256, metavar="PX",
                   help="shorter side in pixels, 0 to keep each image's size (default: 256)")
    r.add_argument("--quality", type=argtypes.integer(1, hi=100), default=95, metavar="Q",
                   help="JPEG quality 1..100 (default: 95)")
    r.add_argument("--workers", type=argtypes.per_core("worker processes"), default=2,
                   metavar="N", help="encoding processes (default: 2)")
    r.add_argument("--verify", action="store_true",
                   help="read every record back after writing")
    r.add_argument("--no-progress", action="store_true",
                   help="show no progress bars (only the summary, as JSON)")
    v = dsub.add_parser("verify", help="check every record of a .rec/.idx pair (exit 1: damaged)",
                        description="Check every record of PREFIX.rec against PREFIX.idx "
                                    "and its digests (PREFIX.digests, where present), and "
                                    "decode it: exit 0 when every record is sound, 1 when "
                                    "any is damaged.")
    v.add_argument("prefix", type=_path, help="path without extension, e.g. data/train")
    v.add_argument("--headers-only", action="store_true",
                   help="fast: record framing and header only (no digest, no decode)")
    v.add_argument("--threads", type=argtypes.per_core("threads"), default=2, metavar="N",
                   help="decoding threads (default: 2)")


def _jobs_parsers(sub) -> None:
    j = sub.add_parser("jobs", help="cluster job scripts",
                       description="Render or submit a job script for PBS (ABCI), UGE (ABCI "
                                   "2019) or Slurm (docs/cluster.md).")
    jsub = j.add_subparsers(dest="jobs_command", required=True, metavar="command")
    for name in ("render", "submit"):
        jr = jsub.add_parser(
            name, help=f"{name} a job script for a scheduler",
            description=("Write a ready job script: the scheduler's directives, the "
                         "repository, config and overrides filled in; every value is "
                         "checked first." if name == "render" else
                         "Render the job script as `jobs render` does and submit it with "
                         "qsub (PBS), qsub -g GROUP (UGE) or sbatch; the exit status is "
                         "theirs."),
            epilog=_examples(f"yasgd jobs {name} --scheduler pbs --nodes 256 --group gXX00000 \\",
                             "    --config examples/configs/paper.yaml"
                             + (" -o job.sh" if name == "render" else " --dry-run")),
            formatter_class=_RAW)
        jr.add_argument("--scheduler", choices=("pbs", "uge", "slurm"), required=True,
                        help="pbs: PBS Professional (ABCI); uge: Univa Grid Engine (ABCI "
                             "2019); slurm")
        jr.add_argument("--nodes", type=int, required=True, metavar="N", help="nodes (>= 1)")
        jr.add_argument("--gpus-per-node", type=int, default=None, metavar="G",
                        help="GPUs per node, one rank each (default: 8 for pbs and slurm, "
                             "4 for uge)")
        jr.add_argument("--config", type=_path, required=True, metavar="CONFIG",
                        help="YAML config the job trains")
        jr.add_argument("--walltime", default=None, metavar="TIME",
                        help="H:MM:SS, H:MM or minutes (default: estimated from the config: "
                             "twice its images at half the paper's per-GPU rate, plus 10 "
                             "minutes; at least 15 minutes)")
        jr.add_argument("--group", default=None,
                        help="the group billed: PBS -P, UGE qsub -g, Slurm --account "
                             "(default: none)")
        jr.add_argument("--queue", default=None,
                        help="PBS queue (default: rt_HF), UGE resource type (default: rt_F) "
                             "or Slurm partition (default: the cluster's)")
        jr.add_argument("--output", "-o", type=_path, default=None, metavar="FILE",
                        help="write the script here, or into a folder as job.sh (job.sbatch) "
                             "(default: stdout" + (")" if name == "render" else
                                                   ", and submit it on stdin)"))
        if name == "submit":        # render submits nothing: it would have nothing to do
            jr.add_argument("--dry-run", action="store_true",
                            help="print the submit command instead of running it")
        jr.add_argument("overrides", nargs="*", metavar=OVERRIDES, help=OVERRIDES_HELP)


def _simulate_parser(sub) -> None:
    d = SIMULATE_DEFAULTS
    s = sub.add_parser(
        "simulate", help="scaling model of synchronous data-parallel training",
        description="Predict the step time, images/s, scaling efficiency and time to train "
                    "of ResNet-50 on ImageNet for a system, from its single-node throughput "
                    "and its network (docs/simulate.md).",
        epilog=_examples("yasgd simulate                     # the paper's run on ABCI",
                         "yasgd simulate --preset dgxa100 --gpus 256 --batch 65536",
                         "yasgd simulate --validate           # against every published run"),
        formatter_class=_RAW)
    s.add_argument("--preset", action=_Typed, default=d["preset"],
                   help="the system (default: %(default)s; `--preset list` prints every "
                        "preset and its sources)")
    s.add_argument("--gpus", action=_Typed, type=argtypes.integer(1), default=d["gpus"],
                   metavar="N", help="GPUs, one rank each (default: %(default)s)")
    s.add_argument("--batch", action=_Typed, type=argtypes.integer(1), default=d["batch"],
                   metavar="B",
                   help="global mini-batch, a multiple of --gpus (default: %(default)s)")
    s.add_argument("--epochs", action=_Typed, type=argtypes.positive("epochs"),
                   default=d["epochs"], metavar="E",
                   help="epochs of ImageNet-1k (default: %(default)s)")
    s.add_argument("--images-per-gpu-s", action=_Typed, type=argtypes.positive(),
                   default=None, metavar="X",
                   help="per-GPU compute throughput, images/s (default: the preset's)")
    s.add_argument("--budget-bytes", action=_Typed, type=argtypes.integer(1), default=None,
                   metavar="BYTES",
                   help="allreduce group budget in bytes (default: the preset's grouping)")
    s.add_argument("--plot", action=_Typed, type=_path, default=None, metavar="PNG",
                   help="write a PNG of efficiency against GPUs and budget "
                        "(a name ending in .png, or a directory: DIR/simulate.png)")
    s.add_argument("--json", action=_Typed, type=_path, default=None, metavar="FILE",
                   help="write the prediction as JSON (a directory: DIR/simulate.json)")
    s.add_argument("--validate", action="store_true", help="print the model against every "
                   "published run it is tested on (no other argument)")
    s.set_defaults(typed=())        # the options typed (_Typed), in the order typed


def _bench_parser(sub) -> None:
    width = max(map(len, BENCHES))
    b = sub.add_parser(
        "bench", help="benchmarks (make bench-*)",
        description="Run one benchmark and write its JSON and Markdown (and plots) to --out "
                    "(docs/benchmarks.md).",
        epilog="benchmarks:\n" + "\n".join(
            textwrap.fill(BENCH_HELP[n], 88, initial_indent=f"  {n:<{width}}  ",
                          subsequent_indent=" " * (width + 4)) for n in BENCHES)
               + "\n\n" + _examples("yasgd bench optimizer --out results --quick",
                                    "yasgd bench largebatch --out results --stop-after 60"),
        formatter_class=_RAW)
    b.add_argument("name", choices=BENCHES, metavar="name",
                   help="the benchmark: " + ", ".join(BENCHES) + " (listed below)")
    b.add_argument("--out", type=_path, default="results", metavar="DIR",
                   help="results directory (default: %(default)s)")
    b.add_argument("--quick", action="store_true", help="fewer repetitions (smoke run)")
    st = b.add_argument_group("largebatch and ablation (cached training studies)")
    st.add_argument("--jobs", type=argtypes.per_core("runs", 1), default=None, metavar="N",
                    help="runs side by side, one process each (default 2, at most one a "
                         "core)")
    st.add_argument("--arms", default=None, metavar="A,B,...",
                    help="comma-separated arm names (default: all)")
    st.add_argument("--max-runs", type=argtypes.integer(0, "runs"), default=None, metavar="N",
                    help="start at most N runs in this sitting (default: no limit)")
    st.add_argument("--stop-after", type=argtypes.positive("minutes", hi=argtypes.YEAR_S // 60),
                    default=None, metavar="MIN",
                    help="start no run after MIN minutes; runs in flight finish (default: "
                         "no limit)")
    st.add_argument("--cache", type=_path, default=None, metavar="DIR",
                    help="result cache folder (default: OUT/runs_cache)")


def parser() -> argparse.ArgumentParser:
    """The parser of ``yasgd`` and every sub-command but ``launch`` (whose line in the
    command list is all it has here: :mod:`yasgd.launch` parses its arguments)."""
    p = _Parser(prog="yasgd", description=DESCRIPTION, epilog=EPILOG, formatter_class=_RAW)
    p.add_argument("--version", action=argtypes.VersionAction)
    sub = p.add_subparsers(dest="command", required=True, title="commands", metavar="command")
    _train_parsers(sub)
    # for --help only: main() hands "yasgd launch ..." (a command after --) to launch.main
    sub.add_parser("launch", help=f"run N ranks of a command on this host through mpirun: "
                                  f"{LAUNCH_USAGE}", add_help=False)
    _data_parsers(sub)
    _jobs_parsers(sub)
    _simulate_parser(sub)
    _bench_parser(sub)

    pf = sub.add_parser("preflight", help="check every rank's node before training (GPUs, MXNet "
                        "kernels, Horovod allreduce); run under the job's launcher",
                        description="Check every rank's node before a training: its GPUs, "
                                    "MXNet's kernels and a Horovod allreduce across the job. "
                                    "A failed check is one line and exit status 3.",
                        epilog=_examples("mpirun -np 8 yasgd preflight --timeout 60"),
                        formatter_class=_RAW)
    pf.add_argument("--timeout", type=argtypes.seconds(), default=120.0, metavar="S",
                    help="end the check with an error when a rank has not finished after S "
                         "seconds (default: 120)")

    pv = sub.add_parser("provenance",
                        help="write provenance.json (environment, versions, git, hosts)",
                        description="Write RUN_DIR/provenance.json: this host's environment, "
                                    "the stack's versions, the git commit and the job's hosts "
                                    "(once per run directory).")
    pv.add_argument("run_dir", type=_path, help="the run directory (made if missing)")
    pv.add_argument("--hostfile", type=_path, default=None, metavar="FILE",
                    help="the job's hosts, one per line (default: $PBS_NODEFILE or "
                         "$SGE_JOB_HOSTLIST, else Slurm's node list, else this host)")
    return p
