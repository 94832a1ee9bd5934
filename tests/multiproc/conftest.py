"""Multi-process tests: every rank runs the same pytest session (launched from
outside: ``python -m yasgd.launch -np 2 -- python -m pytest tests/multiproc``).
Tests must be valid at any world size, 1 included, and must not skip on some
ranks only (collectives would hang)."""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)


@pytest.fixture(scope="session")
def world():
    from yasgd import dist
    return dist.world(force_horovod=True)
