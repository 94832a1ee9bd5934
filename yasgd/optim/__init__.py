"""Optimizers: yasgd's LARS (registered with MXNet as ``yasgdlars``) and a factory."""
from yasgd.optim.lars import LARS, YasgdLARS  # noqa: F401


def from_config(optim_cfg, lr_schedule, wd_schedule):
    """The optimizer a config asks for, with its schedules; all options explicit."""
    import mxnet as mx
    o = optim_cfg
    if o.name == "lars":
        return LARS(learning_rate=o.lr, momentum=o.momentum, wd=o.wd, eta=o.eta,
                    epsilon=o.epsilon, momentum_correction=o.momentum_correction,
                    wd_in_denominator=o.wd_in_denominator, exclude_1d=o.exclude_1d,
                    fused=o.fused,
                    multi_precision=o.multi_precision, lr_scheduler=lr_schedule,
                    wd_scheduler=wd_schedule)
    cls = mx.optimizer.NAG if o.name == "nag" else mx.optimizer.SGD
    opt = cls(learning_rate=o.lr, momentum=o.momentum, wd=o.wd, lr_scheduler=lr_schedule,
              multi_precision=o.multi_precision)
    return opt
