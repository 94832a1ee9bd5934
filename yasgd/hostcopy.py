"""Small host values on the device without a blocking copy.

``mx.nd.array(values, ctx=mx.gpu(i))`` copies from NumPy into device memory synchronously
(MXNet's ``SyncCopyFromCPU``): inside a training step that stalls the Python thread until
the device is free. :func:`device_array` builds the array on the host instead (in pinned
memory for a GPU) and lets MXNet's engine copy it to the device asynchronously, ordered
before the operators that read it. On the CPU it is ``mx.nd.array`` itself. The training
step creates its small arrays (the LARS learning rates and weight decays, the loaders'
labels and images) only through this function (tests/unit/test_fp16.py checks it).
"""
from __future__ import annotations


def device_array(values, ctx, dtype="float32"):
    """``values`` (a sequence or NumPy array) as an NDArray of ``dtype`` on ``ctx``."""
    import mxnet as mx
    if ctx.device_type in ("cpu", "cpu_pinned", "cpu_shared"):
        return mx.nd.array(values, ctx=ctx, dtype=dtype)
    host = mx.nd.array(values, ctx=mx.cpu_pinned(0), dtype=dtype)
    return host.as_in_context(ctx)
