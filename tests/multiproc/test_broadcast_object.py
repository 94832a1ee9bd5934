"""World.broadcast_object: rank 0's object arrives whole on every rank, whatever every
other rank passed, for empty, small, nested and large (multi-megabyte) objects and for
many broadcasts in a row (valid at any world size)."""
import hashlib
import pickle

import numpy as np
import pytest

from yasgd import resume


def _objects():
    rng = np.random.RandomState(5)
    return [None, ("ok", "/runs/demo-20261204-120000", None), {},
            {"state": {"step": 12, "params": [f"w{i}" for i in range(300)]},
             "files": {"params": {"bytes": 123, "sha256": "ab" * 32}}},
            rng.bytes(3 * 1024 * 1024 + 17),
            resume.ResumePlan(["/runs/a/ckpt-2", "/runs/a/ckpt-1"],
                              [("/runs/a/ckpt-3", "cut short")])]


@pytest.mark.parametrize("i", range(len(_objects())))
def test_rank_0s_object_reaches_every_rank(world, i):
    expected = _objects()[i]
    mine = expected if world.is_root else ("not rank 0's", world.rank)
    got = world.broadcast_object(mine, name=f"test.bcast.{i}")
    assert got == expected and type(got) is type(expected)
    # every rank holds the same bytes: the digests' sum over ranks is size x rank 0's
    d = int.from_bytes(hashlib.sha256(pickle.dumps(got)).digest()[:6], "big")
    total = world.allreduce_sum([float(d)], name=f"test.bcast.digest.{i}")
    assert total[0] == float(d) * world.size


def test_many_broadcasts_in_a_row_keep_their_order(world):
    got = [world.broadcast_object(k if world.is_root else -1, name=f"test.bcast.row.{k}")
           for k in range(40)]
    assert got == list(range(40))


def test_no_horovod_broadcast_op_is_used(world, monkeypatch):
    """Objects and arrays travel by allreduce: Horovod 0.28.1's MXNet broadcast op reads
    its name after queueing it, freed memory when the broadcast completed first."""
    import horovod.mxnet as hvd
    import horovod.mxnet.mpi_ops as ops
    import mxnet as mx

    def refuse(*a, **k):
        raise AssertionError("a Horovod broadcast op was used")
    for mod in (hvd, ops):
        for fn in ("broadcast", "broadcast_", "broadcast_object", "broadcast_parameters"):
            if hasattr(mod, fn):
                monkeypatch.setattr(mod, fn, refuse)
    got = world.broadcast_object({"k": 1} if world.is_root else None, name="test.nobcast")
    assert got == {"k": 1}
    a = [mx.nd.full((3, 4), 7.0 if world.is_root else -1.0), mx.nd.full((5,), float(world.rank))]
    world.broadcast_arrays(a, name="test.nobcast.arrays")
    assert (a[0].asnumpy() == 7.0).all() and (a[1].asnumpy() == 0.0).all()


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "int32", "uint8"])
def test_broadcast_arrays_are_rank_0s_bits(world, dtype):
    """x + (-0) + ... + (-0) == x exactly: every rank ends with rank 0's bits, inf, the
    smallest normal and both zeros included."""
    import mxnet as mx
    rng = np.random.RandomState(11)
    if dtype.startswith("float"):
        ref = (rng.randn(257) * 10.0 ** rng.randint(-30, 30, 257)).astype(dtype)
        ref[:5] = [np.inf, -np.inf, np.finfo(dtype).tiny, 0.0, -0.0]
    else:
        ref = rng.randint(0, 100, 257).astype(dtype)
    mine = ref if world.is_root else np.full_like(ref, 3)
    arr = mx.nd.array(mine, dtype=dtype)
    world.broadcast_arrays([arr], name=f"test.bcast.bits.{dtype}")
    assert arr.asnumpy().tobytes() == ref.tobytes()
