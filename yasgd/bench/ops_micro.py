"""Micro-benchmark of yasgd.ops: our operator library ('yasgd') against MXNet's built-ins
('mxnet') over ResNet-50's parameter tensors, at 1 and 2 OpenMP threads.

    python -m yasgd.bench.ops_micro [--out results] [--quick]

Tensors: the 161 trainable tensors of ResNet-50 (53 conv weights, 53 BN gamma + 53 beta,
FC weight + bias; 25.56 M floats). Shapes are taken from Gluon's ``resnet50_v1``
(initialised, one forward/backward on a (1, 3, 224, 224) batch, so the gradients are
real); its 32 extra conv biases (v1 only) are dropped, leaving the v1.5 set (same shapes).
Operations, each end to end (Python call + operator + ``mx.nd.waitall()``):

    multi_sum_sq(W)          squared norms of the 161 weights, one call
    multi_sum_sq(W+G)        of the weights and the gradients, one call (322 arrays)
    ... built-in             MXNet's multi_sum_sq as it is (float32 accumulation, ~1e-3
                             relative error on CPU): the 'mxnet' backend's CPU norms
                             accumulate in float64 instead (astype + dot per array)
    lars_trust_ratio         161 layers
    sgd_mom_update fp32      161 layers, in place
    sgd_mom_update fp16+fp32 master    161 layers, fp16 weights/grads, fp32 master + mom
    lars step                multi_sum_sq(W+G) + trust ratio + fp32 update

Each figure is the median of ``iters`` timed calls after 3 warm-up calls. Every thread
count runs in its own process (OpenMP reads OMP_NUM_THREADS at start-up), both backends
side by side in that process. Writes ``bench_ops_micro.json`` and ``bench_ops_micro.md``
(table + hardware) into ``out``.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from yasgd import outputs, usage
from yasgd.supervise import die_with_parent

THREADS = (1, 2)
BACKENDS = ("yasgd", "mxnet")
BUILTIN = "multi_sum_sq(W+G) built-in"   # MXNet's own, float32 accumulation ('mxnet' only)
CASES = ("multi_sum_sq(W)", "multi_sum_sq(W+G)", BUILTIN, "lars_trust_ratio",
         "sgd_mom_update fp32", "sgd_mom_update fp16+master", "lars step (fp32)")


def resnet50_tensors():
    """(weights, grads): ResNet-50's 161 trainable tensors and their gradients."""
    import mxnet as mx
    net = mx.gluon.model_zoo.vision.resnet50_v1()
    net.initialize(mx.init.Xavier(magnitude=2), ctx=mx.cpu())
    x = mx.nd.random.uniform(shape=(1, 3, 224, 224))
    with mx.autograd.record():
        loss = net(x).sum()
    loss.backward()
    params = [p for p in net.collect_params().values()
              if p.grad_req != "null" and not (p.name.endswith("_bias") and "conv" in p.name)]
    return [p.data().copy() for p in params], [p.grad().copy() for p in params]


def _median_ms(fn, iters):
    import mxnet as mx
    for _ in range(3):
        fn()
        mx.nd.waitall()
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        fn()
        mx.nd.waitall()  # sync point: the timing must include the queued work
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def worker(iters):
    """Time every case for both backends in this process; returns {backend: {case: ms}}."""
    import mxnet as mx
    from yasgd import ops
    ws, gs = resnet50_tensors()
    n = len(ws)
    lrs = mx.nd.full((n,), 1e-3)
    wds = mx.nd.full((n,), 5e-5)
    moms = [mx.nd.zeros(w.shape) for w in ws]
    w16 = [w.astype("float16") for w in ws]
    g16 = [g.astype("float16") for g in gs]
    w32 = [w.copy() for w in ws]
    moms16 = [mx.nd.zeros(w.shape) for w in ws]
    w_sq = ops.multi_sum_sq(ws, backend="mxnet")
    g_sq = ops.multi_sum_sq(gs, backend="mxnet")
    out = {}
    for be in BACKENDS:
        if be == "yasgd" and not ops.load_library():
            out[be] = {"error": ops.library_error()}
            continue

        def lars_step(be=be):
            sq = ops.multi_sum_sq(ws + gs, backend=be)
            rates = ops.lars_trust_ratio(lrs, sq[:n], sq[n:], wds, 0.001, 1e-9, 1.0,
                                         backend=be)
            ops.multi_sgd_mom_update(ws, gs, moms, rates, wds, 0.9, 1.0, backend=be)

        fns = {
            "multi_sum_sq(W)": lambda be=be: ops.multi_sum_sq(ws, backend=be),
            "multi_sum_sq(W+G)": lambda be=be: ops.multi_sum_sq(ws + gs, backend=be),
            "lars_trust_ratio": lambda be=be: ops.lars_trust_ratio(
                lrs, w_sq, g_sq, wds, 0.001, 1e-9, 1.0, backend=be),
            "sgd_mom_update fp32": lambda be=be: ops.multi_sgd_mom_update(
                ws, gs, moms, lrs, wds, 0.9, 1.0, backend=be),
            "sgd_mom_update fp16+master": lambda be=be: ops.multi_sgd_mom_update(
                w16, g16, moms16, lrs, wds, 0.9, 1.0, weights32=w32, backend=be),
            "lars step (fp32)": lars_step,
        }
        if be == "mxnet":
            fns[BUILTIN] = lambda: ops.builtin_multi_sum_sq(ws + gs)
        out[be] = {case: round(_median_ms(fns[case], iters), 3) for case in CASES
                   if case in fns}
    return {"tensors": n, "floats": int(sum(w.size for w in ws)), "results": out}


def hardware():
    """The machine and software: yasgd.bench.common.hardware (shared by every benchmark)."""
    import mxnet  # noqa: F401 -- loaded: its version is the one in use
    from yasgd.bench.common import hardware as common_hardware
    return common_hardware()


def table(report):
    cols = [(t, be) for t in THREADS for be in BACKENDS]
    lines = ["| operation (ms, median) | " + " | ".join(
        "%s %d thr" % (be, t) for t, be in cols) + " |",
        "|---|" + "---:|" * len(cols)]
    for case in CASES:
        cells = []
        for t, be in cols:
            r = report["threads"][str(t)]["results"].get(be, {})
            cells.append("%.2f" % r[case] if case in r else "n/a")
        lines.append("| %s | %s |" % (case, " | ".join(cells)))
    hw = report["hardware"]
    lines.append("")
    lines.append("%d tensors, %.2f M floats; %s, %s cores, MXNet %s, Python %s."
                 % (report["tensors"], report["floats"] / 1e6, hw["cpu"], hw["cores"],
                    hw["mxnet"], hw["python"]))
    return "\n".join(lines)


def run(out_dir="results", quick=False):
    """Run one worker process per thread count; write JSON + Markdown; return the report."""
    iters = 5 if quick else 20
    report = {"iters": iters, "threads": {}}
    for t in THREADS:
        env = dict(os.environ, OMP_NUM_THREADS=str(t), MXNET_OMP_MAX_THREADS=str(t))
        env.pop("YASGD_OPS", None)
        proc = subprocess.run([sys.executable, "-m", "yasgd.bench.ops_micro", "--worker",
                               "--iters", str(iters)], env=env, capture_output=True,
                              text=True, check=True, preexec_fn=die_with_parent())
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        report["threads"][str(t)] = res
        report["tensors"], report["floats"] = res["tensors"], res["floats"]
    report["hardware"] = hardware()
    os.makedirs(out_dir, exist_ok=True)
    md = table(report)
    with outputs.together():
        outputs.write_json(os.path.join(out_dir, "bench_ops_micro.json"), report)
        outputs.write_text(os.path.join(out_dir, "bench_ops_micro.md"),
                           "# yasgd.ops micro-benchmark\n\n" + md + "\n")
    print(md)
    return report


def main(argv=None):
    ap = usage.Parser(prog="python -m yasgd.bench.ops_micro",
                      description="Time yasgd.ops' operators against MXNet's built-ins over "
                                  "ResNet-50's parameter tensors, at 1 and 2 OpenMP threads.")
    ap.add_argument("--out", default="results", metavar="DIR",
                    help="results directory for bench_ops_micro.json/.md (default: "
                         "%(default)s)")
    ap.add_argument("--quick", action="store_true", help="5 timed calls instead of 20")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--iters", type=int, default=20, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.iters)))
    else:
        run(out_dir=args.out, quick=args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(usage.run(main))
