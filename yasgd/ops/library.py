"""Which backend runs yasgd.ops' operators, and the loading of our operator library.

Selection: the ``backend=`` argument of a call, else the environment variable
``YASGD_OPS=yasgd|mxnet`` (tests, benchmarks), else ``DEFAULT_BACKEND`` when its library is
available, else ``'mxnet'``. Forcing ``'yasgd'`` when the library cannot be loaded raises.
Whatever is selected, arrays on a GPU go to MXNet's built-ins (:func:`use_yasgd`): the
library has CPU kernels only.

The library ``libyasgd_ops.so`` (built by ``python -m yasgd.ops.build``) is loaded once,
lazily, with ``mx.library.load``; a failure to load it is remembered and reported by
:func:`library_error`, and the default then falls back to MXNet's operators.
"""
import os
import threading
import warnings

from .paths import LIBRARY

# mxnet, and the builder's staleness check, are imported inside load_library: `python -m
# yasgd.ops.build` imports this package first, which then must neither need nor wait for
# MXNet, nor import the builder before it runs as a script.

#: The backend used when neither ``backend=`` nor ``YASGD_OPS`` says otherwise (and its
#: library is available): ours, because it was faster than MXNet's built-ins in every
#: operation of a LARS step on CPU when measured (``python -m yasgd.bench.ops_micro``).
DEFAULT_BACKEND = "yasgd"
BACKENDS = ("yasgd", "mxnet")
ENV_VAR = "YASGD_OPS"

__all__ = ["DEFAULT_BACKEND", "BACKENDS", "ENV_VAR", "LIBRARY", "load_library",
           "library_error", "backend", "use_yasgd"]

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


def use_yasgd(explicit, ctx):
    """Whether a call with ``backend=explicit`` on arrays of context ``ctx`` runs our
    library: it is selected and the arrays are on the CPU. GPU arrays always take MXNet's
    built-ins, which have GPU kernels; ours has none."""
    return _choose(explicit) == "yasgd" and ctx.device_type == "cpu"
