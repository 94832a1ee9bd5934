"""The per-step stop decision across ranks: a flag set on one rank only makes every
rank stop at the same step, one step after it was set (valid at any world size)."""
from yasgd import faults


def test_flag_on_the_last_rank_stops_every_rank_at_the_same_step(world):
    faults.reset()
    poll = faults.StopPoll(world)
    stopped_at = None
    try:
        for step in range(1, 9):
            if step == 4 and world.rank == world.size - 1:
                faults._state["SIGINT"] = 1         # what the SIGINT handler does
            name = poll.after_step(step)
            if name:
                stopped_at = (step, name)
                break
        poll.drain()
    finally:
        faults.reset()
    expected = 4 if world.size == 1 else 5        # one step later across ranks
    assert stopped_at == (expected, "SIGINT")
    steps = world.allreduce_sum([float(stopped_at[0])], name="test.stop.steps")
    assert steps[0] == expected * world.size      # the same step everywhere
