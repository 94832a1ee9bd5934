"""Scaling model of synchronous data-parallel ResNet-50 training (``yasgd simulate``).

Modules, each used by the next: :mod:`~yasgd.simulate.network` (gradient tensors, groups,
allreduce cost), :mod:`~yasgd.simulate.compute` (the per-GPU step line t(b) = c (h + b) and the
lock-step), :mod:`~yasgd.simulate.presets` (the systems, every constant sourced),
:mod:`~yasgd.simulate.model` (one iteration and the prediction), :mod:`~yasgd.simulate.plot`
and :mod:`~yasgd.simulate.output` (sweeps, PNG, text, JSON).
"""
from yasgd.simulate.compute import (fixed_cost_images, lockstep_factor, per_image_cost,  # noqa
                                    step_cv, step_time, train_to_infer_h)
from yasgd.simulate.model import (DEFAULT_BUDGET, GROUPINGS, IMAGENET_TRAIN,  # noqa: F401
                                  IMAGENET_VAL, iteration, lockstep, per_gpu_throughput,
                                  per_image_s, predict, update_s)
from yasgd.simulate.network import (ALGORITHMS, Topology, allreduce_time,  # noqa: F401
                                    backward_tensors, fujitsu_cubic_bounds, fujitsu_cubic_groups,
                                    group_sizes, grouped, is_batchnorm, resnet50_layers,
                                    ring_allreduce_time, ring_reduce_scatter_time,
                                    tree_allreduce_time, tree_correction)
from yasgd.simulate.output import PAPER, preset_list, report  # noqa: F401
from yasgd.simulate.presets import PRESETS, Preset, SingleNode, get_preset  # noqa: F401
