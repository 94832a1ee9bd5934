"""The operator API of yasgd.ops: batched squared norms, LARS trust ratios, and the fused
SGD-momentum update of all layers. NDArray in, NDArray out, no host synchronisation.

Each call runs our library when :func:`yasgd.ops.library.use_yasgd` says so (selected and
on the CPU), else MXNet's built-ins; both follow the same formulas, and
tests/unit/test_ops.py holds both to the same float64 NumPy references.
"""
import numpy as np

from yasgd.hostcopy import device_array

from . import layout
from .library import use_yasgd

__all__ = ["MXNET_MAX_WEIGHTS_PER_CALL", "multi_sum_sq", "builtin_multi_sum_sq",
           "lars_trust_ratio", "multi_sgd_mom_update"]

#: MXNet 1.9.1's preloaded multi-SGD ops take at most this many weights per call
#: (``MultiSGDKernelParam::N``; one more crashes MXNet 1.9.1 on CPU).
MXNET_MAX_WEIGHTS_PER_CALL = 60


def _f32(values, ctx):
    """An NDArray of float32 values on ctx; NDArrays pass through (no copy, no sync)."""
    import mxnet as mx
    if isinstance(values, mx.nd.NDArray):
        return values
    return device_array(values, ctx)


def multi_sum_sq(arrays, backend=None):
    """Squared L2 norm of every array, in one operator call: float32 NDArray (len(arrays),).

    ``out[i] = sum(arrays[i] ** 2)``; float32 and float16 inputs. Pass weights and
    gradients together (``multi_sum_sq(weights + grads)``) to get both norms of every
    layer in a single call, as the paper's batched norm computation does. Both backends
    accumulate in double on CPU ('mxnet': :func:`_sum_sq_float64`); on a GPU MXNet's
    built-in runs (:func:`builtin_multi_sum_sq`).
    """
    import mxnet as mx
    arrays = list(arrays)
    if not arrays:
        raise ValueError("multi_sum_sq needs at least one array")
    ctx = arrays[0].context
    if use_yasgd(backend, ctx):
        return mx.nd.yasgd_multi_sum_sq(*arrays, num_arrays=len(arrays))
    if ctx.device_type == "cpu":
        return _sum_sq_float64(arrays)
    return builtin_multi_sum_sq(arrays)


def _sum_sq_float64(arrays):
    """The CPU fallback: MXNet's own operators, accumulating in float64 (one ``astype``
    and one ``dot`` per array, then one ``concat``). MXNet 1.9.1's CPU ``multi_sum_sq``
    accumulates sequentially in float32 even for float64 inputs, far too coarse on
    layers of millions of elements for the 1e-6 the LARS tests ask; BLAS's float64
    ``dot`` leaves only the final rounding to float32. It costs more than the built-in
    (yasgd.bench.ops_micro times both)."""
    import mxnet as mx
    sums = []
    for a in arrays:
        f = a.astype("float64").reshape(-1)   # astype first: MKLDNN layouts cannot reshape
        sums.append(mx.nd.dot(f, f))
    return mx.nd.concat(*sums, dim=0).astype("float32")


def builtin_multi_sum_sq(arrays):
    """MXNet's built-in ``multi_sum_sq`` as it is (the GPU fallback; on CPU reported by the
    benchmarks for comparison): one call per dtype, results in the caller's order."""
    import mxnet as mx
    arrays = list(arrays)
    ctx = arrays[0].context
    names = [np.dtype(a.dtype).name for a in arrays]
    if len(set(names)) == 1:
        return mx.nd.multi_sum_sq(*arrays, num_arrays=len(arrays))
    # MXNet's multi_sum_sq wants one dtype per call: one call per dtype, then reorder.
    parts, order = [], []
    for dt in sorted(set(names)):
        idx = [i for i, name in enumerate(names) if name == dt]
        parts.append(mx.nd.multi_sum_sq(*[arrays[i] for i in idx], num_arrays=len(idx)))
        order += idx
    pos = np.argsort(order)
    return mx.nd.take(mx.nd.concat(*parts, dim=0), device_array(pos, ctx, dtype="int32"))


def lars_trust_ratio(lrs, w_sq, g_sq, wds, eta, eps, rescale_grad, backend=None):
    """Per-layer LARS learning rate, float32 NDArray (N,)::

        out[i] = lrs[i] * eta * ||w_i|| / (||g_i|| * rescale_grad + wds[i] * ||w_i|| + eps)

    with ``||w_i|| = sqrt(w_sq[i])``, ``||g_i|| = sqrt(g_sq[i])`` (``w_sq``/``g_sq`` from
    :func:`multi_sum_sq` of the weights and the *un-rescaled* gradients), and
    ``out[i] = lrs[i]`` when ``||w_i|| == 0`` or ``||g_i|| == 0`` (MXNet's multi_lars).
    ``lrs``/``wds``: float32 NDArrays (N,) (lists are copied to the device, no sync).
    """
    import mxnet as mx
    ctx = w_sq.context
    lrs, wds = _f32(lrs, ctx), _f32(wds, ctx)
    kw = dict(eta=float(eta), eps=float(eps), rescale_grad=float(rescale_grad))
    if use_yasgd(backend, ctx):
        return mx.nd.yasgd_lars_trust_ratio(lrs, w_sq, g_sq, wds, **kw)
    return mx.nd.multi_lars(lrs, w_sq, g_sq, wds, **kw)


def multi_sgd_mom_update(weights, grads, moms, lrs, wds, momentum, rescale_grad,
                         weights32=None, backend=None, clip_gradient=None):
    """SGD with momentum over all layers, in place (MXNet's preloaded_multi_sgd semantics)::

        g   = rescale_grad * grad          (clipped to +-clip_gradient when given)
        mom = momentum * mom - lrs[i] * wds[i] * w - lrs[i] * g
        w   = w + mom

    ``weights32`` (fp32 master copies of fp16 weights): the master copy is the ``w`` above
    (fp32 math, the fp16 gradient widened exactly) and the fp16 weight becomes
    ``fp16(w32)``. ``lrs``/``wds``: float32 NDArrays (len(weights),), e.g. the output of
    :func:`lars_trust_ratio`. Updates ``weights``, ``moms`` (and ``weights32``); returns None.
    'yasgd': one operator call (+ one MXNet op per deferred weight, below); 'mxnet': chunks
    of MXNET_MAX_WEIGHTS_PER_CALL weights.

    MKLDNN layouts ('yasgd'): after an *inference* forward, MXNet's MKLDNN conv/dense
    kernels re-store their float32 weights in an MKLDNN-internal layout (asynchronously,
    from the engine), and the next *training* forward queues the conversion back -- at
    the time that forward *executes*, which, with Python running ahead of the engine, is
    usually after this update was queued. A lib_api.h operator cannot write such an
    array (MXNet's dispatcher fails in ``NDArray::data()``: "We can't generate TBlob for
    MKLDNN data"; inputs are fine, it hands the operator a default-layout copy), and no
    Python call converts an array in place without a host sync (``reshape``,
    ``tostype``, ``copyto``, ``[:] =`` keep the layout). So every weight that can carry
    an MKLDNN layout (float32, ndim >= 2, MKLDNN enabled; see
    :func:`yasgd.ops.layout.may_be_mkldnn`) is *deferred* unless it belongs to a guarded
    block (:func:`yasgd.ops.layout.guard_layouts`: converted back to the default layout
    once after each inference forward, then written in place): the operator updates its
    momentum (and master copy) only (``defer_weights``, out=mom) and the weight is then
    written by MXNet's own ``broadcast_add`` (``w = w + m``: the same float32 arithmetic)
    or ``cast`` (``w = w32``), which handle any layout. The other weights (BN, biases,
    float16) are updated in place by the operator as before. Cost: one more pass over the
    deferred weights.
    """
    import mxnet as mx
    weights, grads, moms = list(weights), list(grads), list(moms)
    n = len(weights)
    if not (len(grads) == len(moms) == n) or (weights32 is not None and len(weights32) != n):
        raise ValueError("weights, grads, moms (and weights32) must have the same length")
    if n == 0:
        return
    ctx = weights[0].context
    lrs, wds = _f32(lrs, ctx), _f32(wds, ctx)
    groups = [weights, grads, moms] + ([list(weights32)] if weights32 is not None else [])
    kw = dict(momentum=float(momentum), rescale_grad=float(rescale_grad))
    if clip_gradient is not None and clip_gradient > 0:
        kw["clip_gradient"] = float(clip_gradient)
    if use_yasgd(backend, ctx):
        data = [a for per_weight in zip(*groups) for a in per_weight]
        defer = [False] * n
        if layout.mkldnn_enabled():
            cand = [i for i, w in enumerate(weights) if layout.may_be_mkldnn(w)]
            for i, ok in zip(cand, layout.writable_in_place([weights[i] for i in cand])):
                defer[i] = not ok
        outs = weights
        if any(defer):
            outs = [m if d else w for w, m, d in zip(weights, moms, defer)]
            kw["defer_weights"] = "".join("1" if d else "0" for d in defer)
        mx.nd.yasgd_multi_sgd_mom_update(*(data + [lrs, wds]), out=outs, num_weights=n,
                                         multi_precision=int(weights32 is not None), **kw)
        for i in (i for i, d in enumerate(defer) if d):
            # MXNet's own ops write w whatever its (MKLDNN) layout
            w = weights[i]
            if weights32 is None:
                mx.nd.broadcast_add(w, moms[i], out=w)      # w = w + m (float32, as fused)
            else:
                mx.nd.cast(weights32[i], dtype=w.dtype, out=w)  # w = w32 (updated master)
        return
    op = (mx.nd.preloaded_multi_mp_sgd_mom_update if weights32 is not None
          else mx.nd.preloaded_multi_sgd_mom_update)
    for s in range(0, n, MXNET_MAX_WEIGHTS_PER_CALL):
        e = min(n, s + MXNET_MAX_WEIGHTS_PER_CALL)
        data = [a for per_weight in zip(*[g[s:e] for g in groups]) for a in per_weight]
        op(*(data + [lrs[s:e], wds[s:e]]), out=weights[s:e], num_weights=e - s, **kw)
