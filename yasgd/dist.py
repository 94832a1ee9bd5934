"""The process world: Horovod when launched by mpirun/horovodrun, a plain single
process otherwise.

``world()`` returns a :class:`World` with rank, size, local_rank and the MXNet
context of this rank (one GPU per local rank when GPUs exist, else the CPU).
Metric reduction across ranks is a sync point: call it at log intervals only.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

_SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "HOROVOD_SIZE", "PMI_SIZE")


def env_world_size() -> int:
    """The world size the launcher announced (mpirun, horovodrun, srun), before any init.

    ``srun --mpi=pmix`` announces no size of its own before MPI starts: its tasks carry
    ``PMIX_RANK`` and Slurm's ``SLURM_STEP_NUM_TASKS``."""
    for var in _SIZE_VARS:
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    if "PMIX_RANK" in os.environ and os.environ.get("SLURM_STEP_NUM_TASKS", "").isdigit():
        return int(os.environ["SLURM_STEP_NUM_TASKS"])
    return 1


def launched_distributed() -> bool:
    """True when started by mpirun/horovodrun with more than one process."""
    return env_world_size() > 1


@dataclass
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1
    horovod: bool = False

    @property
    def is_root(self) -> bool:
        return self.rank == 0

    def context(self):
        import mxnet as mx
        if mx.context.num_gpus() > 0:
            return mx.gpu(self.local_rank % mx.context.num_gpus())
        return mx.cpu()

    # -- collectives (each one is a sync point) --------------------------------
    def allreduce_sum(self, values: Sequence[float], name: str) -> np.ndarray:
        """Sum a small vector of host floats over ranks (a sync point)."""
        arr = np.asarray(values, dtype=np.float64)
        if self.size == 1:
            return arr
        import mxnet as mx
        import horovod.mxnet as hvd
        out = hvd.allreduce(mx.nd.array(arr, dtype="float64"), average=False, name=name)
        return out.asnumpy()

    # Broadcasts go through allreduce: rank 0's values plus -0.0 from every other rank,
    # exact in every dtype. Not Horovod's broadcast op: in Horovod 0.28.1 its MXNet path
    # (EnqueueTensorBroadcast) reads the operation's name once more after queueing the
    # tensor. When the background thread completes the broadcast first, MXNet has
    # already deleted the finished operation and, with it, the parameters holding that
    # name: the rank reads freed memory (a segmentation fault, or a rank stuck copying
    # garbage at exit). Horovod's allreduce and allgather never touch the name after
    # queueing it.
    def broadcast_arrays(self, arrays: Sequence, name: str) -> None:
        """Overwrite ``arrays`` (MXNet NDArrays) on every rank with rank 0's values, in
        place, and wait until they hold them (a sync point)."""
        if self.size == 1 or not arrays:
            return
        import horovod.mxnet as hvd
        if not self.is_root:
            for a in arrays:
                a[:] = 0      # then -0.0: x + (-0.0) is x for every float x, both zeros
                a *= -1       # included (MXNet writes a scalar -0.0 as +0.0)
        for k, a in enumerate(arrays):
            hvd.allreduce_(a, average=False, name=f"{name}.{k}")
        for a in arrays:
            a.wait_to_read()

    def broadcast_object(self, obj, name: str):
        """Rank 0's ``obj`` (pickled) on every rank; the others' ``obj`` is ignored."""
        if self.size == 1:
            return obj
        import pickle
        import mxnet as mx
        payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL) if self.is_root else b""
        size = mx.nd.array([len(payload)], dtype="int64")
        self.broadcast_arrays([size], name=f"{name}.size")
        n = int(size.asscalar())
        data = (mx.nd.array(np.frombuffer(payload, dtype=np.uint8), dtype="uint8") if self.is_root
                else mx.nd.zeros((n,), dtype="uint8"))
        self.broadcast_arrays([data], name=f"{name}.data")
        return obj if self.is_root else pickle.loads(data.asnumpy().tobytes())

    def barrier(self, name: str = "barrier") -> None:
        self.allreduce_sum([0.0], name=name)


_WORLD: Optional[World] = None


def current() -> Optional[World]:
    """This process's World if :func:`world` has made it, else None."""
    return _WORLD


def world(force_horovod: bool = False) -> World:
    """Initialise (once) and return this process's World."""
    global _WORLD
    if _WORLD is not None:
        return _WORLD
    if force_horovod or launched_distributed():
        import horovod.mxnet as hvd
        hvd.init()
        _WORLD = World(rank=hvd.rank(), size=hvd.size(), local_rank=hvd.local_rank(),
                       local_size=hvd.local_size(), horovod=True)
    else:
        _WORLD = World()
    return _WORLD
