"""BN statistics re-estimation equals the arithmetic mean of batch statistics (closed form)."""
import mxnet as mx
import numpy as np

from yasgd import bn


class FixedLoader:
    def __init__(self, batches):
        self.batches, self.epoch, self.polish_calls = batches, 0, []

    def set_epoch(self, epoch, polish=False):
        self.epoch = epoch
        self.polish_calls.append(polish)

    def __iter__(self):
        return iter([(mx.nd.array(x), mx.nd.zeros((len(x),))) for x in self.batches])


def test_recalibrate_gives_mean_of_batch_statistics():
    rng = np.random.RandomState(0)
    net = mx.gluon.nn.Sequential()
    net.add(mx.gluon.nn.Conv2D(4, 3, in_channels=2, use_bias=False),
            mx.gluon.nn.BatchNorm(momentum=0.9, in_channels=4))
    net.initialize(mx.init.Xavier())
    batches = [rng.randn(8, 2, 6, 6).astype(np.float32) * (i + 1) + i for i in range(3)]
    loader = FixedLoader(batches + [rng.randn(8, 2, 6, 6).astype(np.float32) * 100])  # 4th unused
    assert bn.recalibrate(net, loader, batches=3) == 3
    conv = [net[0](mx.nd.array(x)).asnumpy() for x in batches]
    mean = np.mean([c.mean(axis=(0, 2, 3)) for c in conv], axis=0)
    var = np.mean([c.var(axis=(0, 2, 3)) for c in conv], axis=0)
    layer = net[1]
    np.testing.assert_allclose(layer.running_mean.data().asnumpy(), mean, rtol=1e-4, atol=1e-5)
    # MXNet keeps the biased (population) batch variance in its moving average
    np.testing.assert_allclose(layer.running_var.data().asnumpy(), var, rtol=1e-3, atol=1e-4)
    assert layer._kwargs["momentum"] == 0.9            # restored
    assert loader.polish_calls == [True, False]        # un-augmented pass, then back


def test_finds_every_bn_layer():
    from yasgd import model
    net = model.build("resnet20", classes=10, in_channels=1)
    assert len(bn.bn_layers(net)) == 1 + 9 * 2 + 2     # stem + 2 per block + 2 projections
