"""yasgd.launch's environment: jobs/common.sh's tuning defaults are filled in unless
--no-tuning-defaults, which the benchmarks use to measure Horovod's own defaults."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROBE = ("import os; print('FUSION=%s CYCLE=%s OMP=%s' % (os.environ.get("
         "'HOROVOD_FUSION_THRESHOLD'), os.environ.get('HOROVOD_CYCLE_TIME'), "
         "os.environ.get('OMP_NUM_THREADS')))")


def _launch(*flags):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HOROVOD_", "OMP_", "OMPI_", "PMIX_"))}
    out = subprocess.run([sys.executable, "-m", "yasgd.launch", "-np", "2", "--timeout", "60",
                          *flags, "--", sys.executable, "-c", PROBE],
                         env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    # one line per rank (mpirun's output forwarding may run the two lines together)
    found = re.findall(r"FUSION=\S+ CYCLE=\S+ OMP=\d+", out.stdout)
    assert len(found) == 2 and found[0] == found[1], out.stdout
    return found[0]


def test_launch_fills_in_common_sh_defaults():
    assert _launch() == "FUSION=0 CYCLE=5 OMP=1"


def test_launch_no_tuning_defaults_leaves_horovod_defaults():
    # Horovod then uses its own 64 MB fusion buffer and cycle time; OMP per rank still set
    assert _launch("--no-tuning-defaults") == "FUSION=None CYCLE=None OMP=1"
