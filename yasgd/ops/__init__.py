"""yasgd's "patched MXNet operators": batched norms and a fused LARS/SGD-momentum update.

Paper: Yamazaki et al., "Yet Another Accelerated SGD", arXiv 1903.12650, section 2
("batched norm computation": LARS needs ||w|| and ||g|| of every layer; one call computes
them for all layers). LARS: You, Gitman, Ginsburg, arXiv 1708.03888.

Two backends with the same Python API (NDArray in, NDArray out, no host synchronisation):

* ``'yasgd'``: our C++ library ``libyasgd_ops.so`` (source ``yasgd_ops.cc``, built by
  ``python -m yasgd.ops.build``, run by ``make install``), loaded once, lazily, with
  ``mx.library.load``: ``yasgd_multi_sum_sq`` (OpenMP over fixed chunks of all arrays,
  double accumulation, bit-identical for any thread count), ``yasgd_lars_trust_ratio``
  and ``yasgd_multi_sgd_mom_update`` (one call over all layers, in place through
  lib_api.h's ``setMutateInputs`` + ``out=weights``; on MKLDNN builds the float32
  conv/dense weights of blocks that are not guarded (:func:`guard_layouts`) are
  *deferred*: the call updates their momenta and MXNet's ``broadcast_add`` then writes
  ``w + m``, see :func:`multi_sgd_mom_update`). The library
  exports only lib_api's C entry points (see yasgd/ops/build.py: with Horovod loaded,
  libmxnet's own lib_api classes used to pre-empt ours). CPU only: arrays on a GPU always
  go to MXNet's built-ins, which have GPU kernels.
* ``'mxnet'``: MXNet 1.9.1's own operators: ``multi_lars``,
  ``preloaded_multi_sgd_mom_update`` / ``preloaded_multi_mp_sgd_mom_update``, and for the
  norms on CPU a float64 composition (``astype`` + ``dot`` per array,
  :func:`_sum_sq_float64`), because the built-in ``multi_sum_sq`` accumulates in float32
  there (on a GPU the built-in runs). The preloaded SGD ops hold at most 60 weights per
  call (``MultiSGDKernelParam::N``; 61 segfaults MXNet 1.9.1 on CPU), so the update is
  issued in chunks of ``MXNET_MAX_WEIGHTS_PER_CALL``.

Selection: the ``backend=`` argument of a call, else the environment variable
``YASGD_OPS=yasgd|mxnet`` (tests, benchmarks), else ``DEFAULT_BACKEND`` when its library is
available, else ``'mxnet'``. Forcing ``'yasgd'`` when the library cannot be loaded raises.

Accuracy: 'yasgd' accumulates squares exactly in double (relative error <= 6e-8, the final
rounding to float32), 'mxnet' in double through BLAS (<= 4e-8 measured); both pass the same
1e-6 tests. MXNet 1.9.1's CPU built-in ``multi_sum_sq`` (:func:`builtin_multi_sum_sq`)
accumulates each array in float32 sequentially (float16 inputs: the squares are rounded to
float16), relative error ~1e-3 on ResNet-50's 2.4 M-element layers and ~1e-5 on any float16
array (tests/unit/test_ops.py bounds it); it is timed next to the others by the benchmark.

``DEFAULT_BACKEND = 'yasgd'``, chosen by measurement (``python -m yasgd.bench.ops_micro``):
2-core x86-64 VM (Intel Xeon, AVX-512 host; the library's AVX2 clone ran), MXNet 1.9.1 CPU
wheel, ResNet-50's 161 trainable tensors (shapes from Gluon's resnet50_v1 without its 32
conv biases = the v1.5 set; 25.56 M floats), median of 20 end-to-end calls (Python +
operator + ``waitall``) after 3 warm-up calls, ms. Another process kept one core busy
(load 1.2-2), which makes both backends slower at 2 threads than at 1::

    operation                    yasgd 1thr  mxnet 1thr  yasgd 2thr  mxnet 2thr
    multi_sum_sq(W), 161            12.9        22.3        23.1        31.4
    multi_sum_sq(W+G), 322          26.3        44.1        32.0        48.0
    lars_trust_ratio, 161            0.04        0.03        0.05        8.0
    sgd_mom_update fp32             24.4       149.1        32.0       176.0
    sgd_mom_update fp16 + master    39.6       264.6        48.0       276.0
    LARS step (norms+ratio+update)  50.6       218.9        60.0       430.0

'yasgd' is faster in every row but the trust ratio (a tie: 161 numbers, Python-bound).
MXNet's preloaded multi-SGD kernel is slow on CPU because it walks all (up to 60) arrays
for every element index; ours walks each array contiguously in 32 Ki-element chunks.

The table predates the deferred weights (MKLDNN layouts, see
:func:`multi_sgd_mom_update`), which add one MXNet ``broadcast_add`` pass over the 54
conv/FC weights. Same VM and tensors, 1 thread, load ~4 (median of 12, ms):
update in place 22.8, deferred 45.5, MXNet 103.0; LARS step 47.7 / 70.3 / 144.2.
'yasgd' stays 2-2.3x faster than the built-ins. Weights of guarded blocks (every
``yasgd.model.build`` network) are written in place again: LARS step 37.6 ms guarded,
68.1 ms unguarded (``make bench-optimizer``, 2 threads).
"""
import ctypes
import os
import threading
import warnings
import weakref

import numpy as np

# mxnet is imported inside the functions, so that `python -m yasgd.ops.build` (which
# imports this package first) neither needs nor waits for it.

__all__ = ["DEFAULT_BACKEND", "BACKENDS", "backend", "load_library", "library_error",
           "multi_sum_sq", "builtin_multi_sum_sq", "lars_trust_ratio",
           "multi_sgd_mom_update", "guard_layouts"]

#: The backend used when neither ``backend=`` nor ``YASGD_OPS`` says otherwise (and its
#: library is available). Chosen by the measurement in this module's docstring.
DEFAULT_BACKEND = "yasgd"
BACKENDS = ("yasgd", "mxnet")
ENV_VAR = "YASGD_OPS"
#: MXNet 1.9.1's preloaded multi-SGD ops take at most this many weights per call.
MXNET_MAX_WEIGHTS_PER_CALL = 60

#: Where yasgd.ops.build puts the compiled library.
LIBRARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libyasgd_ops.so")

_lock = threading.Lock()
_state = {"tried": False, "error": None}


def load_library():
    """Load ``libyasgd_ops.so`` into MXNet once; True when its operators are available."""
    with _lock:
        if not _state["tried"]:
            _state["tried"] = True
            if not os.path.exists(LIBRARY):
                _state["error"] = ("%s is not built (run `python -m yasgd.ops.build`)"
                                   % LIBRARY)
            else:
                try:
                    import mxnet as mx
                    from .build import is_stale
                    if is_stale():
                        warnings.warn("%s is older than its sources; rebuild it with "
                                      "`python -m yasgd.ops.build`" % LIBRARY)
                    mx.library.load(LIBRARY, verbose=False)
                except Exception as e:  # noqa: BLE001 -- any failure means: fall back
                    _state["error"] = "loading %s failed: %s" % (LIBRARY, e)
                    warnings.warn("yasgd.ops: %s; using MXNet's operators"
                                  % _state["error"])
        return _state["error"] is None


def library_error():
    """Why the library is unavailable (None when it is loaded or not yet tried)."""
    return _state["error"]


def _choose(explicit=None):
    """The backend name to use: explicit argument > $YASGD_OPS > DEFAULT_BACKEND."""
    name = explicit or os.environ.get(ENV_VAR) or None
    if name is not None:
        if name not in BACKENDS:
            raise ValueError("yasgd.ops backend must be one of %s, got %r" % (BACKENDS, name))
        if name == "yasgd" and not load_library():
            raise RuntimeError("yasgd.ops backend 'yasgd' was requested but %s"
                               % library_error())
        return name
    if DEFAULT_BACKEND == "yasgd" and load_library():
        return "yasgd"
    return "mxnet"


def backend():
    """'yasgd' when our operator library is loaded and selected, else 'mxnet'."""
    return _choose()


def _use_yasgd(explicit, ctx):
    # The library has CPU kernels only; GPU arrays always take MXNet's built-ins.
    return _choose(explicit) == "yasgd" and ctx.device_type == "cpu"


def _f32(values, ctx):
    """An NDArray of float32 values on ctx; NDArrays pass through (no copy, no sync)."""
    import mxnet as mx
    if isinstance(values, mx.nd.NDArray):
        return values
    return mx.nd.array(values, ctx=ctx, dtype="float32")


_mkldnn_built = []  # [bool] once asked: is this MXNet built with MKLDNN?


def _mkldnn_enabled():
    """True when MXNet may keep arrays in MKLDNN layouts (built with it, not switched off)."""
    if not _mkldnn_built:
        import mxnet as mx
        try:
            _mkldnn_built.append(bool(mx.runtime.Features().is_enabled("MKLDNN")))
        except Exception:  # noqa: BLE001 -- unknown: assume it may
            _mkldnn_built.append(True)
    flag = os.environ.get("MXNET_MKLDNN_ENABLED", "1").strip().lower()
    return _mkldnn_built[0] and flag not in ("0", "false")


def _may_be_mkldnn(arr):
    """Can MXNet hold ``arr`` in an MKLDNN layout? Its MKLDNN conv/deconv/dense kernels
    re-store float32 weights of ndim >= 2 (1-D arrays have no other layout; MXNet 1.9's
    MKLDNN takes float32 and bfloat16 only)."""
    return arr.ndim >= 2 and np.dtype(arr.dtype) == np.float32


class _LayoutGuard:
    """The layout state of one guarded block's weights: ``dirty`` from an inference forward
    (or the guard's creation) until the next update has made them default-layout again."""

    def __init__(self, block):
        self.block = weakref.ref(block)
        self.params = None      # the block's Parameters, collected at the first update
        self.dirty = True       # unknown history: make sure once, before the first write

    def saw_call(self):
        """The block is being called: an inference-mode call may re-store its weights."""
        from mxnet import autograd
        if not autograd.is_training():
            self.dirty = True

    def arrays(self):
        """(guard's live Parameters' data arrays); [] once the block is gone."""
        block = self.block()
        if block is None:
            return []
        if self.params is None:
            self.params = list(block.collect_params().values())
        out = []
        for p in self.params:
            try:
                out.extend(p.list_data())
            except Exception:  # noqa: BLE001 -- not initialised (yet): nothing to write
                pass
        return out


_guards = []   # one _LayoutGuard per guarded block


def guard_layouts(block):
    """Let the 'yasgd' update write ``block``'s weights in place on MKLDNN builds.

    Without a guard, every weight MXNet may hold in an MKLDNN layout is deferred (see
    :func:`multi_sgd_mom_update`): safe whatever ran before, at the cost of one more MXNet
    pass over those weights every step (about 25 ms of a 55 ms LARS step over ResNet-50's
    tensors on the 2-core machine of the README). A guard watches calls of ``block``
    and marks it *dirty* whenever it runs in inference mode (``autograd.is_training()``
    false: evaluation, ``predict_mode``), the only way Gluon lets MKLDNN's conv/dense
    kernels re-store their weights. Blocks whose class has a ``_layout_guard`` attribute
    (``yasgd.model.ResNet``) report their calls themselves (``guard.saw_call()`` in
    ``__call__``); any other block gets a forward pre-hook on itself (MXNet then warns
    once when it is hybridized that hooks of a *child* of a HybridBlock take no effect:
    this hook sits on the block that is called). The next update that writes those
    weights first waits for MXNet's engine (``waitall``: the one host synchronisation,
    once after each evaluation, never in a steady run of training steps) and converts any
    MKLDNN-layout weight of the block back to the default layout (the C API's
    ``MXNDArrayGetData``, which reorders such an array in place); from then on the
    operator writes them in place. ``yasgd.model.build`` guards every network it
    builds. The contract: in inference mode the guarded block's weights are run only by
    calling the block -- calling one of its children alone, a raw ``mx.nd.Convolution``
    on a weight, or another block sharing the Parameters would not be seen (guard that
    block too). Returns ``block``.
    """
    guard = _LayoutGuard(block)
    if hasattr(type(block), "_layout_guard"):
        block._layout_guard = guard
    else:
        block.register_forward_pre_hook(lambda _block, _args: guard.saw_call())
    with _lock:
        _guards[:] = [g for g in _guards if g.block() is not None] + [guard]
    return block


def _to_default_layout(arr):
    """Convert ``arr`` to MXNet's default layout in place, synchronously, if MKLDNN holds
    it in its own (MXNet 1.9's ``MXNDArrayGetData`` reorders such an array and waits; on a
    default-layout array it only returns the data pointer). Raises MXNetError where the C
    API cannot (older MXNet)."""
    from mxnet.base import _LIB, check_call
    ptr = ctypes.c_void_p()
    check_call(_LIB.MXNDArrayGetData(arr.handle, ctypes.byref(ptr)))


def _writable_in_place(weights):
    """For each weight (float32, ndim >= 2, MKLDNN build): True when the operator may write
    it in place -- it belongs to a guarded block (:func:`guard_layouts`) whose weights are
    known to be in the default layout. A dirty guard is made clean here: one ``waitall``,
    then every MKLDNN-capable weight of its block converted to the default layout."""
    import mxnet as mx
    with _lock:
        guards = [g for g in _guards if g.block() is not None]
    arrays = {id(g): g.arrays() for g in guards}
    owner = {}
    for g in guards:
        for a in arrays[id(g)]:
            owner[id(a)] = (g, a)
    found = []
    for w in weights:
        entry = owner.get(id(w))
        found.append(entry[0] if entry is not None and entry[1] is w else None)
    dirty = {id(g): g for g in found if g is not None and g.dirty}
    if dirty:
        mx.nd.waitall()   # pending inference forwards and their reorders have run
        for key, g in dirty.items():
            try:
                for a in arrays[key]:
                    if _may_be_mkldnn(a):
                        _to_default_layout(a)
            except mx.base.MXNetError as e:
                warnings.warn("yasgd.ops: cannot convert MKLDNN-layout weights in place "
                              "(%s); their updates stay deferred" % str(e).splitlines()[0])
                continue
            g.dirty = False
    return [g is not None and not g.dirty for g in found]


def multi_sum_sq(arrays, backend=None):  # pylint: disable=redefined-outer-name
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
    if _use_yasgd(backend, ctx):
        return mx.nd.yasgd_multi_sum_sq(*arrays, num_arrays=len(arrays))
    if ctx.device_type == "cpu":
        return _sum_sq_float64(arrays)
    return builtin_multi_sum_sq(arrays)


def _sum_sq_float64(arrays):
    """The CPU fallback: MXNet's own operators, accumulating in float64 (one ``astype``
    and one ``dot`` per array, then one ``concat``). MXNet 1.9.1's CPU ``multi_sum_sq``
    accumulates sequentially in float32 even for float64 inputs (relative error 1.1e-3
    on ResNet-50's weights, 1.8e-3 on one 2.4 M-element tensor), too coarse for the
    1e-6 the LARS tests ask; BLAS's float64 ``dot`` is exact to ~4e-8 after the final
    rounding to float32. It costs about 2.5x the built-in (see yasgd.bench.ops_micro)."""
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
    return mx.nd.take(mx.nd.concat(*parts, dim=0), mx.nd.array(pos, ctx=ctx, dtype="int32"))


def lars_trust_ratio(lrs, w_sq, g_sq, wds, eta, eps, rescale_grad,
                     backend=None):  # pylint: disable=redefined-outer-name
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
    if _use_yasgd(backend, ctx):
        return mx.nd.yasgd_lars_trust_ratio(lrs, w_sq, g_sq, wds, **kw)
    return mx.nd.multi_lars(lrs, w_sq, g_sq, wds, **kw)


def multi_sgd_mom_update(weights, grads, moms, lrs, wds, momentum, rescale_grad,
                         weights32=None, backend=None,  # pylint: disable=redefined-outer-name
                         clip_gradient=None):
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
    an MKLDNN layout (float32, ndim >= 2, MKLDNN enabled; see :func:`_may_be_mkldnn`) is
    *deferred* unless it belongs to a guarded block (:func:`guard_layouts`: converted back
    to the default layout once after each inference forward, then written in place):
    the operator updates its momentum (and master copy) only
    (``defer_weights``, out=mom) and the weight is then written by MXNet's own
    ``broadcast_add`` (``w = w + m``: the same float32 arithmetic) or ``cast``
    (``w = w32``), which handle any layout. The other weights (BN, biases, float16) are
    updated in place by the operator as before. Cost: one more pass over the deferred
    weights (see the module docstring).
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
    if _use_yasgd(backend, ctx):
        data = [a for per_weight in zip(*groups) for a in per_weight]
        defer = [False] * n
        if _mkldnn_enabled():
            cand = [i for i, w in enumerate(weights) if _may_be_mkldnn(w)]
            for i, ok in zip(cand, _writable_in_place([weights[i] for i in cand])):
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
