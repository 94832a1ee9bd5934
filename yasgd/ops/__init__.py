"""yasgd's "patched MXNet operators": batched norms and a fused LARS/SGD-momentum update.

Paper: Yamazaki et al., "Yet Another Accelerated SGD", arXiv 1903.12650, section 2
("batched norm computation": LARS needs ||w|| and ||g|| of every layer; one call computes
them for all layers). LARS: You, Gitman, Ginsburg, arXiv 1708.03888.

Three modules, one concern each, all re-exported here (``from yasgd import ops``):

* :mod:`yasgd.ops.library`: which backend runs (``backend=``, ``$YASGD_OPS``,
  ``DEFAULT_BACKEND``) and the loading of ``libyasgd_ops.so``;
* :mod:`yasgd.ops.layout`: the MKLDNN layout guard (:func:`guard_layouts`), which decides
  which weights the 'yasgd' update may write in place;
* :mod:`yasgd.ops.api`: the operators (:func:`multi_sum_sq`, :func:`lars_trust_ratio`,
  :func:`multi_sgd_mom_update`, :func:`builtin_multi_sum_sq`).

Two backends with the same Python API (NDArray in, NDArray out, no host synchronisation):

* ``'yasgd'``: our C++ library ``libyasgd_ops.so`` (source ``yasgd_ops.cc``, built by
  ``python -m yasgd.ops.build``, run by ``make install``), loaded once, lazily, with
  ``mx.library.load``: ``yasgd_multi_sum_sq`` (OpenMP over fixed chunks of all arrays,
  double accumulation, bit-identical for any thread count), ``yasgd_lars_trust_ratio``
  and ``yasgd_multi_sgd_mom_update`` (one call over all layers, in place through
  lib_api.h's ``setMutateInputs`` + ``out=weights``; on MKLDNN builds the float32
  conv/dense weights of blocks that are not guarded are *deferred*: the call updates
  their momenta and MXNet's ``broadcast_add`` then writes ``w + m``, see
  :func:`multi_sgd_mom_update`). The library exports only lib_api's C entry points (see
  yasgd/ops/build.py: with Horovod loaded, libmxnet's own lib_api classes used to pre-empt
  ours). CPU only: arrays on a GPU always go to MXNet's built-ins, which have GPU kernels.
* ``'mxnet'``: MXNet 1.9.1's own operators: ``multi_lars``,
  ``preloaded_multi_sgd_mom_update`` / ``preloaded_multi_mp_sgd_mom_update``, and for the
  norms on CPU a float64 composition (``astype`` + ``dot`` per array), because the built-in
  ``multi_sum_sq`` accumulates in float32 there (on a GPU the built-in runs). The preloaded
  SGD ops hold at most 60 weights per call (``MultiSGDKernelParam::N``; more crash MXNet
  1.9.1 on CPU), so the update is issued in chunks of ``MXNET_MAX_WEIGHTS_PER_CALL``.

Accuracy: 'yasgd' accumulates squares exactly in double, so only the final rounding to
float32 remains; 'mxnet' accumulates in double through BLAS; both pass the same 1e-6
tests. MXNet 1.9.1's CPU built-in ``multi_sum_sq`` (:func:`builtin_multi_sum_sq`)
accumulates each array in float32 sequentially (float16 inputs: the squares are rounded to
float16), which is far coarser on large layers and on any float16 array
(tests/unit/test_ops.py bounds it); the benchmark times it next to the others.

Why 'yasgd' is the default (``python -m yasgd.bench.ops_micro`` and
``make bench-optimizer`` measure it): it was faster than MXNet's built-ins in every
operation of a LARS step over ResNet-50's tensors on CPU, the trust ratio excepted (a tie:
one number per layer, bound by Python). MXNet's preloaded multi-SGD kernel is slow on CPU
because it walks all (up to 60) arrays for every element index; ours walks each array
contiguously in fixed chunks. The deferred writes of unguarded weights add one MXNet pass
over the conv/FC weights; the weights of guarded blocks (every ``yasgd.model.build``
network) are written in place and do not pay it.
"""
from . import api, layout, library
from .api import (MXNET_MAX_WEIGHTS_PER_CALL, builtin_multi_sum_sq, lars_trust_ratio,
                  multi_sgd_mom_update, multi_sum_sq)
from .layout import guard_layouts
from .library import (BACKENDS, DEFAULT_BACKEND, ENV_VAR, LIBRARY, backend, library_error,
                      load_library)

# Internal state that tests inspect (the same objects, not copies).
from .layout import _guards, mkldnn_enabled as _mkldnn_enabled  # noqa: E402,F401
from .library import _state  # noqa: E402,F401

__all__ = ["DEFAULT_BACKEND", "BACKENDS", "ENV_VAR", "LIBRARY", "MXNET_MAX_WEIGHTS_PER_CALL",
           "api", "layout", "library", "backend", "load_library", "library_error",
           "multi_sum_sq", "builtin_multi_sum_sq", "lars_trust_ratio",
           "multi_sgd_mom_update", "guard_layouts"]
