"""How ``make test-e2e`` shares these tests between two pytest-xdist workers.

Much of the suite's wall time is waiting (a scheduler's polling, a stall timeout, mpirun's
grace, a signal's checkpoint), so two workers overlap it. Each file goes whole to one of two
groups (``--dist loadgroup``): a file's module-scoped fixtures (a Slurm, a data folder) are
made once, and the two Slurms of the job-script files never run side by side. JOBS holds the
job scripts, the launcher, the preflight, the checkpoint checks and the install plan; every
other file (the 2-rank trainings under faults and signals, the study benches) is TRAINING.
"""
import pytest

JOBS = {"test_jobs.py", "test_jobs_injection.py", "test_launch.py", "test_preflight.py",
        "test_checkpoint_fallback.py", "test_install_plan.py"}


def pytest_collection_modifyitems(items):
    for item in items:
        group = "jobs" if item.path.name in JOBS else "training"
        item.add_marker(pytest.mark.xdist_group(group))
