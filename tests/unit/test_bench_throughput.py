"""yasgd.bench.throughput: how the 2-rank launches of one Horovod setting are combined."""
from yasgd.bench import throughput as tp


def _launch(baseline_ms, yasgd_ms):
    return {"size": 2, "times": {tp.B_HYB: {"median_ms": baseline_ms},
                                 tp.Y_HYB: {"median_ms": yasgd_ms}}}


def test_faster_launch_is_chosen_by_the_baseline_as_a_whole():
    """The launch whose baseline stepped fastest counts, yasgd's loop from the same launch
    (never yasgd's best of the launches), and every launch's medians are kept."""
    slow, fast = _launch(4600, 4100), _launch(2800, 2900)
    out = tp.faster_launch([slow, fast])
    assert out["times"][tp.B_HYB]["median_ms"] == 2800
    assert out["times"][tp.Y_HYB]["median_ms"] == 2900      # not 4100's launch, not min(...)
    assert out["launches"] == 2
    assert out["launch_medians_ms"] == {tp.B_HYB: [4600, 2800], tp.Y_HYB: [4100, 2900]}


def test_one_launch_passes_through():
    one = _launch(3000, 2700)
    out = tp.faster_launch([one])
    assert out["times"] == one["times"] and out["launches"] == 1
