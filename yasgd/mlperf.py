"""MLPerf-format log (``mlperf.log`` next to ``metrics.jsonl``, rank 0 only).

Written through the ``mlperf-logging`` package's ``mllog`` (``:::MLLOG {...}``
lines), with the keys of the MLPerf training rules for ResNet with LARS:

    init_start (process start) ... submission_* , cache_clear, seed,
    global_batch_size, gradient_accumulation_steps, train_samples, eval_samples,
    opt_name, lars_opt_base_learning_rate, lars_opt_learning_rate_warmup_epochs,
    lars_opt_learning_rate_decay_poly_power, lars_opt_learning_rate_decay_steps,
    lars_opt_end_learning_rate, lars_epsilon, lars_opt_weight_decay,
    lars_opt_momentum ... init_stop, run_start,
    block_start/stop (first_epoch_num, epoch_count: the epochs up to the next
    evaluation), epoch_start/stop (epoch_num), eval_start/stop, eval_accuracy
    (value: top-1 as a fraction, metadata epoch_num), run_stop (status).

Epochs are numbered from 1 (``epoch_num`` = epochs done at the end of that
epoch). ``run_stop`` is ``success`` when the target (``train.target_accuracy``)
was reached, or, with no target, when the run finished; otherwise ``aborted``
(an ``atexit`` hook writes it when the process ends on an error, SIGTERM or a
missed target). For ``sgd``/``nag`` the ``sgd_opt_*`` keys replace the LARS ones.

The ``mlperf`` config section sets the submission fields. The package's own
checker validates a log (``tests/e2e/test_resume.py`` runs it):

    python -m mlperf_logging.compliance_checker --usage training --ruleset 4.0.0 mlperf.log

4.0.0 is the last rule set with ResNet (4.1.0 retired it). ``division: open``
(default) passes; ``closed`` also demands ImageNet's target (eval_accuracy
>= 0.759) and MLPerf's fixed LARS values (end LR 1e-4, epsilon 0, poly power 2,
weight decay 1e-4 x 2^k), which the embedded Fashion-MNIST demo does not use.
A resumed run appends its segment to the same file, so that file holds two
``run_start`` lines and does not pass: an MLPerf result is one uninterrupted run.
"""
from __future__ import annotations

import atexit
import logging
import os
import socket
import time
from typing import Callable, Optional

T_IMPORT = time.time()   # ~ process start (yasgd.train imports this module first)


def _dataset_size(loader, fallback: int) -> int:
    """Samples in the whole set (not this rank's shard) the loader reads from."""
    if hasattr(loader, "images"):                        # fashion_mnist.ArrayLoader
        return len(loader.images)
    if hasattr(loader, "rf") and hasattr(loader, "lo"):  # recordio validation: a shard of rf
        return len(loader.rf)
    if hasattr(loader, "num_samples"):                   # recordio training
        return int(loader.num_samples)
    return int(fallback)


class MLPerfLog:
    """Rank 0 with a run directory writes; everywhere else every call is a no-op."""

    def __init__(self, path: Optional[str], cfg=None, is_eval_epoch: Callable[[int], bool] = None):
        self.cfg, self.is_eval_epoch = cfg, is_eval_epoch
        self.ml, self._open, self._block_open = None, False, False
        if not path:
            return
        from mlperf_logging.mllog import mllog
        logger = logging.getLogger(f"yasgd.mlperf.{id(self)}")
        logger.propagate = False
        logger.setLevel(logging.INFO)
        self._handler = logging.FileHandler(path, mode="a")
        logger.addHandler(self._handler)
        self.ml = mllog.MLLogger(logger=logger, default_stack_offset=2,
                                 root_dir=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        atexit.register(self._abort_if_open)

    @classmethod
    def for_run(cls, s, is_eval_epoch: Callable[[int], bool]) -> "MLPerfLog":
        cfg = s.cfg
        on = cfg.mlperf.enabled and s.run_dir and s.world.is_root
        log = cls(os.path.join(s.run_dir, "mlperf.log") if on else None, cfg, is_eval_epoch)
        if log.ml is not None:
            log._header(s)
        return log

    def _e(self, key, value=None, **metadata):
        self.ml.event(key=key, value=value, metadata=metadata or None)

    def _header(self, s) -> None:
        from mlperf_logging.mllog import constants as c
        cfg, ml = s.cfg, self.ml
        ml.start(key=c.INIT_START, time_ms=int(T_IMPORT * 1000))
        m = cfg.mlperf
        device = "gpu" if "gpu" in str(s.ctx) else "cpu"
        for key, value in ((c.SUBMISSION_BENCHMARK, c.RESNET), (c.SUBMISSION_DIVISION, m.division),
                           (c.SUBMISSION_ORG, m.org), (c.SUBMISSION_STATUS, m.status),
                           (c.SUBMISSION_PLATFORM, m.platform or
                            f"{socket.gethostname()}-{s.world.size}x{device}"),
                           (c.CACHE_CLEAR, True), (c.SEED, cfg.run.seed),
                           (c.GLOBAL_BATCH_SIZE, cfg.train.global_batch),
                           (c.GRADIENT_ACCUMULATION_STEPS, cfg.train.accumulate),
                           (c.TRAIN_SAMPLES, _dataset_size(s.train_loader,
                                                           s.steps_per_epoch * cfg.train.global_batch)),
                           (c.EVAL_SAMPLES, _dataset_size(s.val_loader, len(s.val_loader) *
                                                          s.val_loader.batch_size * s.world.size))):
            self._e(key, value)
        o, sc = cfg.optim, cfg.schedule
        warm = sc.warmup_epochs * s.steps_per_epoch
        decay_steps = int(round(cfg.train.epochs * s.steps_per_epoch - warm))
        self._e(c.OPT_NAME, o.name if o.name == "lars" else "sgd")
        p = "lars_opt" if o.name == "lars" else "sgd_opt"
        for key, value in ((f"{p}_base_learning_rate", o.lr),
                           ("lars_opt_learning_rate_warmup_epochs" if o.name == "lars"
                            else c.OPT_LR_WARMUP_EPOCHS, sc.warmup_epochs),
                           (f"{p}_learning_rate_decay_poly_power", sc.power),
                           (f"{p}_learning_rate_decay_steps", decay_steps),
                           (f"{p}_end_learning_rate", sc.end_lr),
                           (f"{p}_weight_decay", o.wd), (f"{p}_momentum", o.momentum)):
            self._e(key, value)
        if o.name == "lars":
            self._e(c.LARS_EPSILON, o.epsilon)
            self._e("lars_opt_trust_coefficient", o.eta)

    # -- the run ---------------------------------------------------------------------
    def run_start(self) -> None:
        if self.ml is None:
            return
        from mlperf_logging.mllog import constants as c
        self.ml.end(key=c.INIT_STOP)
        self.ml.start(key=c.RUN_START)
        self._open = True

    def epoch_start(self, epoch: int) -> None:
        if self.ml is None:
            return
        from mlperf_logging.mllog import constants as c
        if not self._block_open:
            count, e = 1, epoch
            while not self.is_eval_epoch(e) and e + 1 < self.cfg.train.epochs:
                count, e = count + 1, e + 1
            self._block = {c.FIRST_EPOCH_NUM: epoch + 1, c.EPOCH_COUNT: count}
            self.ml.start(key=c.BLOCK_START, metadata=dict(self._block))
            self._block_open = True
        self.ml.start(key=c.EPOCH_START, metadata={c.EPOCH_NUM: epoch + 1})

    def epoch_stop(self, epoch: int) -> None:
        if self.ml is None:
            return
        from mlperf_logging.mllog import constants as c
        self.ml.end(key=c.EPOCH_STOP, metadata={c.EPOCH_NUM: epoch + 1})

    def eval_start(self, epoch: int) -> None:
        if self.ml is None:
            return
        from mlperf_logging.mllog import constants as c
        self.ml.start(key=c.EVAL_START, metadata={c.EPOCH_NUM: epoch + 1})

    def eval_stop(self, epoch: int, accuracy: float) -> None:
        if self.ml is None:
            return
        from mlperf_logging.mllog import constants as c
        self.ml.end(key=c.EVAL_STOP, metadata={c.EPOCH_NUM: epoch + 1})
        self.ml.event(key=c.EVAL_ACCURACY, value=float(accuracy), metadata={c.EPOCH_NUM: epoch + 1})
        self._block_stop()

    def _block_stop(self) -> None:
        from mlperf_logging.mllog import constants as c
        if self._block_open:
            self.ml.end(key=c.BLOCK_STOP, metadata={c.FIRST_EPOCH_NUM: self._block[c.FIRST_EPOCH_NUM]})
            self._block_open = False

    def run_stop(self, success: bool, epochs: int) -> None:
        if self.ml is None or not self._open:
            return
        from mlperf_logging.mllog import constants as c
        self._block_stop()
        self.ml.end(key=c.RUN_STOP, metadata={c.STATUS: c.SUCCESS if success else c.ABORTED,
                                              c.EPOCH_NUM: epochs})
        self._open = False
        self._handler.close()

    def _abort_if_open(self) -> None:
        if self.ml is not None and self._open:
            try:
                from mlperf_logging.mllog import constants as c
                self._block_stop()
                self.ml.end(key=c.RUN_STOP, metadata={c.STATUS: c.ABORTED})
                self._handler.flush()
            except Exception:   # interpreter shutting down: nothing more to do
                pass
            self._open = False
