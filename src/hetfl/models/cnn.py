"""Convolutional networks of the FL papers, trained for all clients at once with grouped convolutions.

* `McMahanCNN` (McMahan et al., 2017, "CNN" for MNIST): two 5×5 convolutions with 32 and 64 channels
  ("same" padding), each followed by ReLU and 2×2 max-pooling, a 512-unit ReLU layer and the output
  layer; 1,663,370 parameters for 1×28×28 input and 10 classes.
* `CifarCNN` (Acar et al., 2021, FedDyn's CIFAR-10/100 model): two 5×5 convolutions with 64 filters
  (no padding), each followed by ReLU and 2×2 max-pooling, then 384- and 192-unit ReLU layers. The
  paper's text says 394 units; its released code (utils_models.py) uses 384, the classic TensorFlow
  CIFAR-10 tutorial net, which is what produced its numbers, so 384 is the default here.
* `CNNBN`: McMahan's CNN with batch norm after each convolution (the FedBN-style variant). BN's running
  statistics are per-client state in the parameter list, flagged by `trainable` (False for buffers).

How the clients are batched: see hetfl.models.layers (grouped layout [B, K·C, H, W] and one
conv2d(groups=K) per layer, backward by aten.convolution_backward, no autograd). The alternative,
torch.func (vmap over grad of functional_call), lowers a vmapped conv2d to the same grouped convolution
but adds autograd's tape and vmap's reshapes; docs/engine.md has the measurement.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from hetfl.models.layers import BatchNorm2d, Conv2d, Flatten, Layer, PoolReLU, ToGrouped, dense_stack
from hetfl.models.net import LayerNet


def image_shape(input_dim: int | Sequence[int], default: tuple[int, int, int]) -> tuple[int, int, int]:
    """(C, H, W) from a sample shape ((C, H, W), (H, W) or (F,)) or a flat feature count F: data sets
    may store images flat, so F = C·H·W with square images and C ∈ {1, 3} is unflattened."""
    if not isinstance(input_dim, int):
        shape = tuple(int(s) for s in input_dim)
        if len(shape) == 3:
            return shape  # type: ignore[return-value]
        if len(shape) == 2:
            return (1, *shape)
        if len(shape) != 1:
            raise ValueError(f"an image shape is (C, H, W), (H, W) or (features,); got {shape}")
        input_dim = shape[0]
    if input_dim == math.prod(default):
        return default
    for c in (1, 3):
        side = math.isqrt(input_dim // c)
        if input_dim % c == 0 and side * side * c == input_dim and side >= 8:
            return (c, side, side)
    raise ValueError(f"cannot infer an image shape from {input_dim} features; pass (C, H, W)")


class ConvNet(LayerNet):
    """[conv k×k (+BN) → ReLU → 2×2 max-pool] × n, flatten, ReLU FC layers, output layer.

    channels_last: the grouped activations' memory order, True (NHWC), False (NCHW) or "auto" (the
    default: NHWC on the CPU but for convolutions of at most 16 output positions, NCHW on CUDA;
    models.layers.channels_last_on, AUTO_NCHW_POSITIONS). On the CPU oneDNN's
    convolutions and above all max-pooling are faster on NHWC (pooling 4–9× on MNIST-sized maps; 1.3–1.4×
    for the whole McMahan CNN step, see docs/engine.md); on an H200 cuDNN's grouped convolutions were
    faster on NCHW (this model's rounds of 64 clients 1.8–1.9×). The layout only changes strides, not the
    arithmetic. A model parameter (`model_params: {channels_last: false}`, also on vgg11 and the ResNets)
    so that `hetfl bench --model-params` can compare the two on any device.
    conv: how the convolutions batch the clients, "auto" (default), "grouped" or "unfold"
    (models.layers.Conv2d).

    The CPU executor (engine.executor): blocks of clients that fit the cache (models.net.LayerNet), trained
    on separate cores, one intra-op thread each. Splitting every B = 10 convolution over both cores left
    10–25 % of the time on the table: a round of 20 and 100 McMahan CNN clients ran 1.12× and 1.26× faster
    on two workers (CNN + BN 1.16× at 100, the CIFAR CNN 1.12× at 20; docs/engine.md). The 2NN's small
    GEMMs are the other way round (0.89×), so MLPs keep intra-op threads.
    """

    client_parallel = True

    def __init__(self, input_shape: tuple[int, int, int], num_classes: int,
                 convs: Sequence[tuple[int, int, int]], hidden: Sequence[int], batch_norm: bool,
                 channels_last: bool | str = "auto", conv: str = "auto") -> None:
        c, h, w = input_shape
        cl = channels_last
        layers: list[Layer] = [ToGrouped((c, h, w), cl)]
        for channels, kernel, padding in convs:
            layer = Conv2d(c, channels, kernel, padding, (h, w), impl=conv, channels_last=cl)
            layers.append(layer)
            if batch_norm:
                layers.append(BatchNorm2d(channels))
            layers.append(PoolReLU())
            c, (h, w) = channels, (layer.hw_out[0] // 2, layer.hw_out[1] // 2)
        layers.append(Flatten((c, h, w)))
        dims = [c * h * w, *hidden, num_classes]
        layers += dense_stack(dims)
        super().__init__(layers)
        self.input_shape, self.num_classes = tuple(input_shape), num_classes


class McMahanCNN(ConvNet):
    """McMahan et al. (2017) MNIST CNN: conv5×5(32)-pool-conv5×5(64)-pool-FC512-FC(classes)."""

    name = "cnn"

    def __init__(self, input_dim: int | Sequence[int] = (1, 28, 28), num_classes: int = 10,
                 channels: tuple[int, int] = (32, 64), hidden: Sequence[int] = (512,),
                 channels_last: bool | str = "auto", conv: str = "auto") -> None:
        super().__init__(image_shape(input_dim, (1, 28, 28)), num_classes,
                         [(channels[0], 5, 2), (channels[1], 5, 2)], hidden, batch_norm=False,
                         channels_last=channels_last, conv=conv)


class CifarCNN(ConvNet):
    """Acar et al. (2021) FedDyn CIFAR CNN: conv5×5(64)-pool-conv5×5(64)-pool-FC384-FC192-FC(classes)."""

    name = "cnn_cifar"

    def __init__(self, input_dim: int | Sequence[int] = (3, 32, 32), num_classes: int = 10,
                 channels: tuple[int, int] = (64, 64), hidden: Sequence[int] = (384, 192),
                 channels_last: bool | str = "auto", conv: str = "auto") -> None:
        super().__init__(image_shape(input_dim, (3, 32, 32)), num_classes,
                         [(channels[0], 5, 0), (channels[1], 5, 0)], hidden, batch_norm=False,
                         channels_last=channels_last, conv=conv)


class CNNBN(ConvNet):
    """McMahan's CNN with BatchNorm2d after each convolution (running statistics are per-client state)."""

    name = "cnn_bn"

    def __init__(self, input_dim: int | Sequence[int] = (1, 28, 28), num_classes: int = 10,
                 channels: tuple[int, int] = (32, 64), hidden: Sequence[int] = (512,),
                 channels_last: bool | str = "auto", conv: str = "auto") -> None:
        super().__init__(image_shape(input_dim, (1, 28, 28)), num_classes,
                         [(channels[0], 5, 2), (channels[1], 5, 2)], hidden, batch_norm=True,
                         channels_last=channels_last, conv=conv)
