"""What every yasgd benchmark shares, after NVIDIA's DeepLearningExamples: warm-up
skipped, medians, side by side in one run, JSON plus a Markdown table that states the
hardware, PNG plots. One name space over four small modules:

* :mod:`yasgd.bench.machine` -- the machine and the software stack (provenance):
  :func:`hardware`, :func:`hardware_line`, :func:`onednn_info`, :func:`cpu_flags`, ...;
* :mod:`yasgd.bench.timing` -- :func:`median_time`, :func:`interleaved_times`,
  :func:`slowest_rank_ms`, :class:`Timing` (every timed call ended by ``mx.nd.waitall()``);
* :mod:`yasgd.bench.output` -- :func:`write_results` (``bench_<name>.json`` and
  ``bench_<name>.md``), :func:`md_table`, :func:`acceptance`, :func:`bar_chart`, JSON files;
* :mod:`yasgd.bench.procs` -- :func:`launch_ranks` (mpirun through yasgd.launch),
  :func:`run_process`, :func:`shipped_env` / :func:`horovod_default_env`,
  :func:`bench_main`.

Benchmarks and the report generators use ``common.NAME``; the modules import each other
one way only (output and procs use machine; timing uses none of them).
"""
from __future__ import annotations

from yasgd.bench.machine import (FLAGS_OF_INTEREST, REPO_ROOT, TUNING_PREFIXES,  # noqa: F401
                                 cores, cpu_flags, cpu_model, hardware, hardware_line,
                                 memory_gib, onednn_info)
from yasgd.bench.output import (acceptance, acceptance_table, acceptance_value,  # noqa: F401
                                bar_chart, fmt, md_table, read_json, say, write_json,
                                write_results, write_text)
from yasgd.bench.procs import (COMMON_SH, bench_main, env_subset,  # noqa: F401
                               horovod_default_env, launch_ranks, run_process, shipped_env)
from yasgd.bench.timing import (Timing, interleaved_times, median_time,  # noqa: F401
                                slowest_rank_ms)
