"""ResNets as the papers train them.

* ``resnet50_v1.5`` (also 18/34/101/152): He et al. 2016 with the stride on the
  3x3 convolution of each bottleneck (v1.5, as NVIDIA's and Fujitsu's MLPerf
  code); 25,557,032 parameters for ResNet-50 with 1,000 classes.
* ``resnet8/20/32/56`` (6n+2 layers): the CIFAR-style ResNets of He et al. 2016,
  section 4.2 (3 stages of widths w, 2w, 4w), for the embedded Fashion-MNIST demo;
  ``stem_stride=2`` makes the 3x3 stem convolution strided (stages at 14, 7, 4 px
  for 28 px input: a quarter of the compute).

Batch-norm handling (YASGD section "batch normalization"): momentum and epsilon
are configurable; ``zero_init_last_gamma`` initialises the gamma of the last BN
of every residual block to 0 (Goyal et al. 2017), so each block starts as the
identity; ``fused_bn_relu`` uses MXNet's ``BatchNormWithReLU`` where a BN is
followed by a ReLU.
"""
from __future__ import annotations

import math
from typing import List, Sequence, Tuple

from mxnet import gluon, init
from mxnet.gluon import nn

BOTTLENECK_LAYERS = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}
BASIC_LAYERS = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3)}


def bn_momentum_for(steps_per_epoch: int, epochs_of_memory: float = 1.0) -> float:
    """The BN moving-average momentum whose memory spans ``epochs_of_memory`` epochs
    of ``steps_per_epoch`` BN updates (forward passes in training: micro-batches).

    An exponential moving average with momentum m forgets a sample after about
    1 / (1 - m) updates. At batch 81,920 an ImageNet epoch is only 16 steps, so
    the usual m = 0.9 (10 steps of memory) averages over less than one epoch of
    statistics from a quickly changing network. This rule ("iterations") picks
    m so that the memory is ``epochs_of_memory`` epochs:
    m = 1 - 1 / (epochs_of_memory * steps_per_epoch), clipped to [0.5, 0.999].
    """
    m = 1.0 - 1.0 / max(1.0, epochs_of_memory * steps_per_epoch)
    return min(0.999, max(0.5, m))


class _BN:
    """Factory of BN layers with the model's momentum/epsilon and the fused option."""

    def __init__(self, momentum: float, eps: float, fused_relu: bool):
        self.momentum, self.eps, self.fused_relu = momentum, eps, fused_relu

    def bn(self, channels: int, zero_gamma: bool = False) -> nn.HybridBlock:
        return nn.BatchNorm(momentum=self.momentum, epsilon=self.eps, in_channels=channels,
                            gamma_initializer="zeros" if zero_gamma else "ones")

    def bn_relu(self, seq: nn.HybridSequential, channels: int) -> None:
        """Append BN followed by ReLU (fused into one operator when asked)."""
        if self.fused_relu:
            seq.add(nn.BatchNormReLU(momentum=self.momentum, epsilon=self.eps, in_channels=channels))
        else:
            seq.add(self.bn(channels))
            seq.add(nn.Activation("relu"))


def _conv(channels: int, kernel: int, stride: int, in_channels: int) -> nn.Conv2D:
    return nn.Conv2D(channels, kernel, strides=stride, padding=kernel // 2, use_bias=False,
                     in_channels=in_channels)


class _Residual(nn.HybridBlock):
    """body(x) + shortcut(x), then ReLU; the shortcut is a 1x1 projection + BN when the
    shape changes (option B of He et al. 2016), else the identity."""

    def _shortcut(self, channels: int, stride: int, in_channels: int, bn: _BN) -> None:
        self.downsample = None
        if stride != 1 or in_channels != channels:
            self.downsample = nn.HybridSequential()
            self.downsample.add(_conv(channels, 1, stride, in_channels))
            self.downsample.add(bn.bn(channels))

    def hybrid_forward(self, F, x):
        # body first, then the shortcut: the order in which the layers were registered, so
        # that registration order is forward order (the allreduce groups rely on it)
        out = self.body(x)
        residual = self.downsample(x) if self.downsample is not None else x
        return F.Activation(out + residual, act_type="relu")


class BasicBlock(_Residual):
    """Two 3x3 convolutions."""

    def __init__(self, channels: int, stride: int, in_channels: int, bn: _BN, zero_gamma: bool):
        super().__init__()
        self.body = nn.HybridSequential()
        self.body.add(_conv(channels, 3, stride, in_channels))
        bn.bn_relu(self.body, channels)
        self.body.add(_conv(channels, 3, 1, channels))
        self.body.add(bn.bn(channels, zero_gamma))
        self._shortcut(channels, stride, in_channels, bn)


class Bottleneck(_Residual):
    """1x1 -> 3x3 (stride here: v1.5) -> 1x1 (x4 channels)."""

    def __init__(self, channels: int, stride: int, in_channels: int, bn: _BN, zero_gamma: bool):
        super().__init__()
        mid = channels // 4
        self.body = nn.HybridSequential()
        self.body.add(_conv(mid, 1, 1, in_channels))
        bn.bn_relu(self.body, mid)
        self.body.add(_conv(mid, 3, stride, mid))
        bn.bn_relu(self.body, mid)
        self.body.add(_conv(channels, 1, 1, mid))
        self.body.add(bn.bn(channels, zero_gamma))
        self._shortcut(channels, stride, in_channels, bn)


class ResNet(nn.HybridBlock):
    """Stem, stages of residual blocks, global average pooling, classifier."""

    _layout_guard = None   # set by yasgd.ops.guard_layouts (yasgd.model.build)

    def __init__(self, block, layers: Sequence[int], widths: Sequence[int], classes: int,
                 imagenet_stem: bool, bn: _BN, zero_gamma: bool, in_channels: int = 3,
                 stem_stride: int = 1):
        super().__init__()
        self.features = nn.HybridSequential()
        if imagenet_stem:
            self.features.add(_conv(64, 7, 2, in_channels))
            bn.bn_relu(self.features, 64)
            self.features.add(nn.MaxPool2D(3, 2, 1))
            in_ch = 64
        else:
            self.features.add(_conv(widths[0], 3, stem_stride, in_channels))
            bn.bn_relu(self.features, widths[0])
            in_ch = widths[0]
        for stage, (n, ch) in enumerate(zip(layers, widths)):
            for i in range(n):
                stride = 2 if (i == 0 and stage > 0) else 1
                self.features.add(block(ch, stride, in_ch, bn, zero_gamma))
                in_ch = ch
        self.features.add(nn.GlobalAvgPool2D())
        self.output = nn.Dense(classes, in_units=in_ch)

    def __call__(self, *args):
        if self._layout_guard is not None:
            self._layout_guard.saw_call()   # an inference call may re-store MKLDNN weights
        return super().__call__(*args)

    def hybrid_forward(self, F, x):
        return self.output(self.features(x))


def build(name: str, classes: int = 1000, width: int = 16, bn_momentum: float = 0.9,
          bn_eps: float = 1e-5, zero_init_last_gamma: bool = True,
          fused_bn_relu: bool = False, in_channels: int = 3, stem_stride: int = 1) -> ResNet:
    """Build a ResNet by name; parameters are not initialised (see yasgd.init).

    The network is guarded (``yasgd.ops.guard_layouts``): on MKLDNN builds the fused LARS
    update writes its conv/dense weights in place, converting them back from MKLDNN's
    layout once after each inference forward."""
    from yasgd import ops
    bn = _BN(bn_momentum, bn_eps, fused_bn_relu)
    key = name.lower().replace("_v1.5", "").replace("_v1b", "")
    if key.startswith("resnet") and key[6:].isdigit():
        depth = int(key[6:])
        if depth in BOTTLENECK_LAYERS:
            return ops.guard_layouts(ResNet(Bottleneck, BOTTLENECK_LAYERS[depth],
                                            (256, 512, 1024, 2048), classes, True, bn,
                                            zero_init_last_gamma, in_channels))
        if depth in BASIC_LAYERS:
            return ops.guard_layouts(ResNet(BasicBlock, BASIC_LAYERS[depth],
                                            (64, 128, 256, 512), classes, True, bn,
                                            zero_init_last_gamma, in_channels))
        if depth >= 8 and (depth - 2) % 6 == 0:
            n = (depth - 2) // 6
            return ops.guard_layouts(ResNet(BasicBlock, (n, n, n),
                                            (width, 2 * width, 4 * width), classes, False, bn,
                                            zero_init_last_gamma, in_channels, stem_stride))
    from yasgd import UsageError
    raise UsageError(f"unknown model.name {name!r} (resnet18/34/50/101/152[_v1.5] or "
                     f"resnet<6n+2> such as resnet8, resnet20, resnet56)")


def imagenet_style(name: str) -> bool:
    """True for the ImageNet ResNets (resnet18/34/50/101/152, 7x7 stem), False for the
    CIFAR-style resnet<6n+2> and unknown names."""
    key = name.lower().replace("_v1.5", "").replace("_v1b", "")
    return (key.startswith("resnet") and key[6:].isdigit()
            and int(key[6:]) in {**BOTTLENECK_LAYERS, **BASIC_LAYERS})


def from_config(model_cfg, in_channels: int = 3, bn_momentum: float = None,
                fused_bn_relu: bool = None) -> ResNet:
    """The network of a ``model`` config section; ``fused_bn_relu``: resolved for the device by
    :func:`yasgd.config.fused_bn_relu` (None: fused only when the key says true)."""
    return build(model_cfg.name, classes=model_cfg.classes, width=model_cfg.width,
                 in_channels=in_channels, stem_stride=model_cfg.stem_stride,
                 bn_momentum=model_cfg.bn_momentum if bn_momentum is None else bn_momentum,
                 bn_eps=model_cfg.bn_eps, zero_init_last_gamma=model_cfg.zero_init_last_gamma,
                 fused_bn_relu=(model_cfg.fused_bn_relu == "true" if fused_bn_relu is None
                                else fused_bn_relu))


def default_initializer() -> init.Initializer:
    """He (MSRA) init for convolutions and dense layers, as in He et al. 2015;
    gamma/beta/zero-gamma keep the initialisers set on their layers."""
    return init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2)


def trainable_params(net: gluon.Block) -> List:
    """The Parameters that get gradients (BN running statistics excluded), in registration
    (forward) order: the tensors the optimizer updates and the allreduce layer sums."""
    return [p for p in net.collect_params().values() if p.grad_req != "null"]


def resnet50_tensors(seed: int = 0, zero_init_last_gamma: bool = True,
                     ctx=None) -> Tuple[ResNet, List]:
    """(network, :func:`trainable_params`) of a ResNet-50 v1.5 (1,000 classes) initialised
    with :func:`default_initializer` after ``mx.random.seed(seed)``, on ``ctx`` (default:
    the CPU): the tensor list of the optimizer and allreduce benchmarks, 161 tensors of
    25,557,032 floats. Which of them get LARS and weight decay is decided by structure
    (:func:`yasgd.params.split_by_structure`), never by name."""
    import mxnet as mx
    net = build("resnet50_v1.5", zero_init_last_gamma=zero_init_last_gamma)
    mx.random.seed(seed)
    net.initialize(default_initializer(), ctx=ctx if ctx is not None else mx.cpu())
    return net, trainable_params(net)


def count_parameters(net: gluon.Block, trainable_only: bool = True) -> int:
    """Number of scalars in the (trainable) parameters; BN running statistics are not trainable."""
    return sum(int(math.prod(p.shape)) for p in net.collect_params().values()
               if p.grad_req != "null" or not trainable_only)
