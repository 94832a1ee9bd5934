"""``yasgd.stack_place.thread_place``: where another thread's Python code is, read from
real threads waiting in code of a module imported from a folder on ``sys.path``."""
import re
import sys
import textwrap
import threading

import pytest

from yasgd.stack_place import thread_place

MODULE = textwrap.dedent("""\
    import threading

    def hold(event, started):
        started.set()
        event.wait()

    def spin(flag, started):
        started.set()
        while not flag: pass  # one line: the frame's line is 9, wherever it is sampled
    """)


@pytest.fixture
def mod(tmp_path, monkeypatch):
    (tmp_path / "placed").mkdir()
    (tmp_path / "placed" / "__init__.py").write_text("")
    (tmp_path / "placed" / "waits.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import placed.waits
    yield placed.waits
    del sys.modules["placed.waits"], sys.modules["placed"]


def _in_thread(target, *args):
    started = threading.Event()
    thread = threading.Thread(target=target, args=args + (started,), daemon=True)
    thread.start()
    started.wait(10)
    return thread


def test_a_wait_in_the_standard_library_names_the_code_that_waits(mod):
    event = threading.Event()
    thread = _in_thread(mod.hold, event)
    try:
        expected = r"wait \(threading\.py:\d+\), called from hold \(placed/waits\.py:5\)"
        for _ in range(500):        # until it waits (started is set one line before)
            place = thread_place(thread.ident)
            if re.fullmatch(expected, place):
                break
            threading.Event().wait(0.01)
        assert re.fullmatch(expected, place), place
    finally:
        event.set()
        thread.join(10)


def test_code_outside_the_standard_library_is_named_alone(mod):
    flag = []
    thread = _in_thread(mod.spin, flag)
    try:
        for _ in range(500):        # until it spins (it may still be in started.set)
            place = thread_place(thread.ident)
            if place.startswith("spin "):
                break
            threading.Event().wait(0.01)
        assert place == "spin (placed/waits.py:9)"
    finally:
        flag.append(True)
        thread.join(10)


def test_a_thread_that_has_ended_or_none_is_nowhere(mod):
    thread = threading.Thread(target=lambda: None)
    thread.start()
    thread.join()
    assert thread_place(thread.ident) == ""
    assert thread_place(None) == ""
