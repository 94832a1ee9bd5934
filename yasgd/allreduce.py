"""The Horovod allreduce layer: communication-aware static layer groups.

YASGD ("communication optimizations"): gradients of many layers are packed into
messages of a few MB, and the layers are split into groups **statically, in
advance**, so that no run-time agreement on which tensors are ready is needed;
a group's allreduce starts as soon as backward has written that group's
gradients, while earlier layers are still in backward.

How that happens here: MXNet's engine is asynchronous, so ``loss.backward()``
only queues work. ``DistributedTrainer._allreduce_grads`` then pushes one
Horovod ``grouped_allreduce_`` per group, in backward order (the last layers
first), the first-ready group with the highest engine priority. Each push
depends only on its own gradient arrays, so it runs as soon as they are
written: communication overlaps the rest of backward.

Averaging happens exactly once: gradients are summed by Horovod (each divided
by ``gradient_predivide_factor`` f first) and the sum is divided by the global
batch through Gluon's ``rescale_grad`` (``_scale x f / size`` here, ``/ batch``
in ``Trainer.step``), which LARS also folds into its gradient norm.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Union

import mxnet as mx

from yasgd.grouping import DEFAULT_BUDGET_BYTES, group_indices, tensor_bytes

__all__ = ["DEFAULT_BUDGET_BYTES", "group_params", "DistributedTrainer", "horovod_trainer"]


def _layer(p) -> str:
    """The layer a Gluon parameter belongs to: Gluon 1.x names it ``<block prefix><name>``
    with the block prefix ending in ``_`` (``conv3_weight``, ``dense0_bias``)."""
    return p.name.rsplit("_", 1)[0]


def group_params(params: Union[Sequence, Dict], budget_bytes: int = DEFAULT_BUDGET_BYTES,
                 num_groups: int = 0) -> List[List]:
    """Split trainable parameters into static groups in backward order.

    ``params``: Gluon parameters in forward order, as a list or a ParameterDict
    (whose registration order yasgd's networks keep equal to forward order), never
    a name-sorted list such as ``gluon.Trainer``'s own. Backward produces
    gradients in reverse order, so the groups are built from the last parameter to
    the first: consecutive layers are packed while the group stays within
    ``budget_bytes``; a layer larger than the budget forms a group of its own; a
    layer's tensors are never split. With ``num_groups > 0`` the layers are
    instead split into that many groups of nearly equal bytes. Pure function of
    names, shapes and dtypes: identical on every rank. The rule itself is
    :func:`yasgd.grouping.group_indices`, shared with the scaling model.
    """
    plist = list(params.values()) if hasattr(params, "values") else list(params)
    backward = [p for p in reversed(plist) if p.grad_req != "null"]
    if not backward:
        return []
    groups = group_indices([tensor_bytes(p) for p in backward], budget_bytes=budget_bytes,
                           num_groups=num_groups, layers=[_layer(p) for p in backward])
    return [[backward[i] for i in g] for g in groups]


class DistributedTrainer(mx.gluon.Trainer):
    """A ``gluon.Trainer`` that averages gradients over Horovod ranks by static groups.

    Signature of Horovod's ``DistributedTrainer`` plus ``group_budget_bytes``.
    ``compression``: ``"none"`` or ``"fp16"`` (gradients cast to fp16 for the
    wire), or a Horovod ``Compression`` class. With one process (or no Horovod)
    it is a plain ``gluon.Trainer``.
    """

    def __init__(self, params, optimizer, optimizer_params=None, compression="none",
                 gradient_predivide_factor: float = 1.0, prefix: Optional[str] = None,
                 num_groups: int = 0, group_budget_bytes: int = DEFAULT_BUDGET_BYTES):
        # gluon.Trainer keeps a ParameterDict's parameters sorted by name (batchnorm* <
        # conv* < dense*, conv10 < conv9), which is not the order backward writes them; the
        # groups are built from the caller's order: a ParameterDict's is registration order,
        # which yasgd's networks keep equal to forward order (yasgd.model)
        super().__init__(params, optimizer, optimizer_params=optimizer_params, kvstore=None)
        self._size, self._hvd = 1, None
        try:
            import horovod.mxnet as hvd
            if hvd.is_initialized():
                self._size, self._hvd = hvd.size(), hvd
        except ImportError:
            pass
        self._fp16 = compression == "fp16" or getattr(compression, "__name__", "") == "FP16Compressor"
        if not gradient_predivide_factor > 0:
            raise ValueError(f"gradient_predivide_factor must be > 0, got {gradient_predivide_factor}")
        # Averaging exactly once: each rank's gradients divided by the predivide factor f
        # before the sum (so a float16 sum over thousands of ranks stays in range), the sum
        # multiplied by f / ranks and divided by the batch through rescale_grad.
        self._predivide = float(gradient_predivide_factor) if self._size > 1 else 1.0
        self._scale *= self._predivide / self._size
        self._prefix = prefix or ""
        self.groups = group_params(params, budget_bytes=group_budget_bytes,
                                   num_groups=num_groups)

    def group_signature(self) -> List[List[int]]:
        """Each group as the indices of its parameters among this trainer's trainable ones."""
        trainable = [p for p in self._params if p.grad_req != "null"]
        pos = {id(p): i for i, p in enumerate(trainable)}
        return [[pos[id(p)] for p in g] for g in self.groups]

    def _allreduce_grads(self):
        if self._size == 1:
            return
        hvd = self._hvd
        for gi, group in enumerate(self.groups):
            grads = [p.list_grad()[0] for p in group]
            wire = [g.astype("float16") for g in grads] if self._fp16 else grads
            # Ready first (last layers) -> highest priority; runs as soon as written.
            hvd.grouped_allreduce_(wire, average=False, name=f"{self._prefix}yasgd.g{gi}",
                                   priority=-gi, prescale_factor=1.0 / self._predivide)
            if self._fp16:
                for g, w in zip(grads, wire):
                    w.astype(g.dtype).copyto(g)


def horovod_trainer(params, optimizer, **kw):
    """Horovod's stock DistributedTrainer (the baseline the grouped one is checked against)."""
    import horovod.mxnet as hvd
    return hvd.DistributedTrainer(params, optimizer, **kw)
