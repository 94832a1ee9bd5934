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


def _rounds(baseline_ms, yasgd_ms):
    return {"size": 2, "times": {
        tp.B_HYB: {"median_ms": sorted(baseline_ms)[len(baseline_ms) // 2],
                   "samples_ms": baseline_ms},
        tp.Y_HYB: {"median_ms": sorted(yasgd_ms)[len(yasgd_ms) // 2], "samples_ms": yasgd_ms}}}


def test_paired_ratio_pools_every_round_of_every_launch():
    """baseline / yasgd round by round, every launch pooled, median: a slow launch hits both
    loops of its rounds alike, so it neither helps nor hurts either one."""
    a = _rounds([3000, 3300, 2700], [2500, 3000, 3000])      # 1.2, 1.1, 0.9
    b = _rounds([4500, 6000, 4000], [5000, 5000, 4000])      # 0.9, 1.2, 1.0 (a slow launch)
    assert tp.paired_ratios([a, b]) == [1.2, 1.1, 0.9, 0.9, 1.2, 1.0]
    out = tp.faster_launch([a, b])
    assert out["paired_ratio"] == 1.05                        # median of the six
    assert out["times"] == a["times"]                         # the table: the faster launch
    # the ratio of one launch's medians can say otherwise: launch a alone gives 3000/3000 = 1.0
    assert a["times"][tp.B_HYB]["median_ms"] / a["times"][tp.Y_HYB]["median_ms"] == 1.0
    # a loop that is slower in most rounds reads < 1
    assert tp.faster_launch([_rounds([1000] * 5, [1100] * 4 + [900])])["paired_ratio"] < 1


def test_without_samples_there_is_no_paired_ratio():
    out = tp.faster_launch([_launch(3000, 2700)])
    assert "paired_ratio" not in out and tp.paired_ratios([_launch(3000, 2700)]) == []
