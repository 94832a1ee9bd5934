"""The MKLDNN layout guard: which weights the 'yasgd' update may write in place.

After an *inference* forward, MXNet's MKLDNN conv/dense kernels may re-store their float32
weights in an MKLDNN-internal layout, which a lib_api.h operator cannot write (see
:func:`yasgd.ops.api.multi_sgd_mom_update`). A guarded block (:func:`guard_layouts`) tracks
when that can have happened, and the next update converts its weights back to the default
layout once (:func:`writable_in_place`) and then writes them in place; the weights of no
guarded block are deferred to MXNet's own operators, which handle any layout.
"""
import ctypes
import os
import threading
import warnings
import weakref

import numpy as np

__all__ = ["guard_layouts", "mkldnn_enabled", "may_be_mkldnn", "writable_in_place"]

_lock = threading.Lock()
_mkldnn_built = []  # [bool] once asked: is this MXNet built with MKLDNN?


def mkldnn_enabled():
    """True when MXNet may keep arrays in MKLDNN layouts (built with it, not switched off)."""
    if not _mkldnn_built:
        import mxnet as mx
        try:
            _mkldnn_built.append(bool(mx.runtime.Features().is_enabled("MKLDNN")))
        except Exception:  # noqa: BLE001 -- unknown: assume it may
            _mkldnn_built.append(True)
    flag = os.environ.get("MXNET_MKLDNN_ENABLED", "1").strip().lower()
    return _mkldnn_built[0] and flag not in ("0", "false")


def may_be_mkldnn(arr):
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
    :func:`yasgd.ops.api.multi_sgd_mom_update`): safe whatever ran before, at the cost of
    one more MXNet pass over those weights every step, a large part of a LARS step on CPU.
    A guard watches calls of ``block``
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


def writable_in_place(weights):
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
                    if may_be_mkldnn(a):
                        _to_default_layout(a)
            except mx.base.MXNetError as e:
                warnings.warn("yasgd.ops: cannot convert MKLDNN-layout weights in place "
                              "(%s); their updates stay deferred" % str(e).splitlines()[0])
                continue
            g.dirty = False
    return [g is not None and not g.dirty for g in found]
