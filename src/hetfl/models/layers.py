"""Batched layers with hand-written backward passes, for K clients whose parameters are stacked on axis 0.

Every layer maps a stacked input to a stacked output and back, without autograd:

* `forward(p, x, training)` returns the output and what the backward pass needs;
* `backward(p, saved, dy, need_dx)` returns the input gradient and the parameter gradients;
* `sgd_backward(p, saved, dy, need_dx, lr)` returns the input gradient and applies w ← w − lr·g IN PLACE.
  For `Linear` this is one fused `baddbmm_` per weight (no gradient tensor is ever written), which saves
  two of the six passes over the weights that autograd + torch.optim.SGD make (write grad, read grad).

Layouts. Fully connected layers work on [K, B, F]. Convolutional layers work on the "grouped" layout
[B, K·C, H, W]: client k owns channels k·C … k·C+C−1, so one `conv2d(groups=K)` trains all clients at
once, batch norm over the K·C channels is exactly per-client batch norm, and max-pooling is per channel
anyway. With K = 1 the grouped layout is plain NCHW, which is how `logits` evaluates the global model.
The CNNs keep it in channels-last memory order (see models.cnn.ConvNet).

Initialisation follows torch.nn (kaiming-uniform with a = √5, i.e. U(±1/√fan_in) for weights and
biases), drawn from the caller's generator so runs reproduce.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

Saved = Any


def _uniform(shape: tuple[int, ...], bound: float, generator: torch.Generator) -> Tensor:
    return torch.rand(shape, generator=generator).mul_(2 * bound).sub_(bound)


class Reshape(nn.Module):
    """Reshape flat or image input [n, ...] to [n, *shape] (MNIST may be stored flat as 784 features)."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.shape = tuple(shape)

    def forward(self, x: Tensor) -> Tensor:
        return x.reshape(x.shape[0], *self.shape)


class Layer:
    """A layer of the batched network; parameter shapes are unstacked (the client axis is added on top)."""

    shapes: tuple[tuple[int, ...], ...] = ()
    trainable: tuple[bool, ...] = ()
    # Per parameter: stored transposed relative to its torch.nn twin (Linear keeps W as [in, out]).
    transposed: tuple[bool, ...] = ()

    def init_params(self, generator: torch.Generator) -> list[Tensor]:
        return []

    def forward(self, p: list[Tensor], x: Tensor, training: bool) -> tuple[Tensor, Saved]:
        raise NotImplementedError

    def backward(self, p: list[Tensor], saved: Saved, dy: Tensor, need_dx: bool
                 ) -> tuple[Tensor | None, list[Tensor]]:
        raise NotImplementedError

    def sgd_backward(self, p: list[Tensor], saved: Saved, dy: Tensor, need_dx: bool, lr: float
                     ) -> Tensor | None:
        dx, grads = self.backward(p, saved, dy, need_dx)
        for w, g, t in zip(p, grads, self.trainable, strict=True):
            if t:
                w.sub_(g, alpha=lr)
        return dx

    def make_modules(self) -> list[nn.Module]:
        return []

    def to_modules(self, p: list[Tensor], modules: list[nn.Module]) -> None:
        pass

    def from_modules(self, modules: list[nn.Module]) -> list[Tensor]:
        return []

    def train_flops(self, batch: int, need_dx: bool) -> int:
        """FLOPs (2 per multiply-add) of forward + backward, one client's minibatch; no elementwise."""
        return 0

    def step_bytes(self, batch: int) -> int:
        """Bytes a step must at least move for this layer: read and write each of its parameters once."""
        return 2 * 4 * sum(math.prod(s) for s in self.shapes)


class FlattenInput(Layer):
    """[K, B, ...] → [K, B, F] (a view for contiguous input)."""

    def forward(self, p: list[Tensor], x: Tensor, training: bool) -> tuple[Tensor, Saved]:
        return x.reshape(x.shape[0], x.shape[1], -1), None

    def backward(self, p: list[Tensor], saved: Saved, dy: Tensor, need_dx: bool
                 ) -> tuple[Tensor | None, list[Tensor]]:
        return None, []  # the network's input: nothing to propagate

    def make_modules(self) -> list[nn.Module]:
        return [nn.Flatten()]


class Linear(Layer):
    """y = x·W + b (optionally ReLU), W [in, out], b [out]; one baddbmm for all clients."""

    def __init__(self, d_in: int, d_out: int, relu: bool) -> None:
        self.d_in, self.d_out, self.relu = d_in, d_out, relu
        self.shapes = ((d_in, d_out), (d_out,))
        self.trainable = (True, True)
        self.transposed = (True, False)

    def init_params(self, generator: torch.Generator) -> list[Tensor]:
        bound = 1 / math.sqrt(self.d_in)
        # torch.nn.Linear draws weight [out, in] first, then bias; keep its layout, store transposed.
        w = _uniform((self.d_out, self.d_in), bound, generator).T.contiguous()
        return [w, _uniform((self.d_out,), bound, generator)]

    def forward(self, p: list[Tensor], x: Tensor, training: bool) -> tuple[Tensor, Saved]:
        W, b = p
        y = torch.baddbmm(b.unsqueeze(1), x, W)
        if self.relu:
            y.relu_()
        return y, (x, y)

    def _dy(self, saved: Saved, dy: Tensor) -> Tensor:
        # threshold_backward is autograd's own ReLU backward (zero where the output is ≤ 0), one pass.
        return torch.ops.aten.threshold_backward(dy, saved[1], 0) if self.relu else dy

    def backward(self, p: list[Tensor], saved: Saved, dy: Tensor, need_dx: bool
                 ) -> tuple[Tensor | None, list[Tensor]]:
        W, _ = p
        x = saved[0]
        dy = self._dy(saved, dy)
        dx = torch.bmm(dy, W.transpose(1, 2)) if need_dx else None
        return dx, [torch.bmm(x.transpose(1, 2), dy), dy.sum(dim=1)]

    def squared_grad_sums(self, p: list[Tensor], saved: Saved, dy: Tensor, need_dx: bool
                          ) -> tuple[Tensor | None, list[Tensor]]:
        """Like backward, for per-sample output gradients dy [K, B, out]: Σ_b g_b ⊙ g_b of the per-sample
        parameter gradients. g_b(W) = x_b ⊗ dy_b, so Σ_b g_b(W)² = (x²)ᵀ(dy²) — one bmm, no per-sample
        gradient is ever formed; Σ_b g_b(b)² = Σ_b dy_b²."""
        W, _ = p
        x = saved[0]
        dy = self._dy(saved, dy)
        dx = torch.bmm(dy, W.transpose(1, 2)) if need_dx else None
        d2 = dy.square()
        return dx, [torch.bmm(x.square().transpose(1, 2), d2), d2.sum(dim=1)]

    def sgd_backward(self, p: list[Tensor], saved: Saved, dy: Tensor, need_dx: bool, lr: float
                     ) -> Tensor | None:
        W, b = p
        x = saved[0]
        dy = self._dy(saved, dy)
        # The input gradient needs the weights before the update, so it comes first.
        dx = torch.bmm(dy, W.transpose(1, 2)) if need_dx else None
        W.baddbmm_(x.transpose(1, 2), dy, alpha=-lr)  # W ← W − lr·xᵀdy in one pass over W
        b.sub_(dy.sum(dim=1), alpha=lr)
        return dx

    def make_modules(self) -> list[nn.Module]:
        return [nn.Linear(self.d_in, self.d_out)] + ([nn.ReLU()] if self.relu else [])

    def to_modules(self, p: list[Tensor], modules: list[nn.Module]) -> None:
        with torch.no_grad():
            modules[0].weight.copy_(p[0].T)
            modules[0].bias.copy_(p[1])

    def from_modules(self, modules: list[nn.Module]) -> list[Tensor]:
        return [modules[0].weight.detach().T.clone(), modules[0].bias.detach().clone()]

    def train_flops(self, batch: int, need_dx: bool) -> int:
        return 2 * batch * self.d_in * self.d_out * (3 if need_dx else 2)


class ToGrouped(Layer):
    """[K, B, C·H·W] or [K, B, C, H, W] → grouped layout [B, K·C, H, W] (one copy of the minibatch)."""

    def __init__(self, shape: tuple[int, int, int], channels_last: bool | str) -> None:
        channels_last_on(channels_last, torch.device("cpu"))  # an unknown value fails here
        self.shape, self.channels_last = shape, channels_last

    def forward(self, p: list[Tensor], x: Tensor, training: bool) -> tuple[Tensor, Saved]:
        K, B = x.shape[:2]
        C, H, W = self.shape
        x = x.reshape(K, B, C, H, W).transpose(0, 1).reshape(B, K * C, H, W)
        # with C = 1 the reshape is a strided view: either layout may need the copy
        cl = channels_last_on(self.channels_last, x.device)
        layout = torch.channels_last if cl else torch.contiguous_format
        return x.contiguous(memory_format=layout), None

    def backward(self, p: list[Tensor], saved: Saved, dy: Tensor, need_dx: bool
                 ) -> tuple[Tensor | None, list[Tensor]]:
        return None, []  # the network's input: nothing to propagate

    def make_modules(self) -> list[nn.Module]:
        return [Reshape(self.shape)]


CONV_IMPLS = ("auto", "grouped", "unfold")
#: conv="auto" computes a layer as `unfold` when its output has at most this many positions, by device type:
#: there cuDNN's grouped convolution in deterministic mode is slow (VGG-11's 4×4 and 2×2 layers on CUDA).
#: Never on the CPU: there those small maps run oneDNN's convolution on NCHW input (AUTO_NCHW_POSITIONS),
#: which beat unfold on VGG-11's 2×2 layers 1.6× (docs/engine.md). Other device types (meta: a CUDA
#: block's measurement) take CUDA's.
AUTO_UNFOLD_POSITIONS = {"cpu": 0, "cuda": 16}
#: ... in training, on at most this many samples per client: the minibatches where unfold was measured
#: faster (B = 10 to 64; the gain is its backward pass). Evaluation runs the grouped convolution: as unfold
#: VGG-11's forward pass ran 0.87-0.93x at 32-64 samples and 0.5x on evaluation's chunks of 4,096, whose
#: im2col columns took 1.3 GB more.
AUTO_UNFOLD_SAMPLES = 64


LAYOUTS = (True, False, "auto")  # the convolutional models' `channels_last`
#: with channels_last "auto", a convolution on the CPU whose output has at most this many positions takes
#: its input NCHW (one copy of a small map) and hands its input gradient back channels-last: oneDNN's
#: direct kernels on NHWC lose to its NCHW ones there. Per client step of VGG-11 (B = 32, one thread, one
#: client, Zen 5): 256→512 at 4×4 17.6 ms NCHW against 20.4 NHWC, 512→512 at 4×4 35.2 against 43.3, at
#: 2×2 15.1 against 24.8 (and 24.7 as unfold); at 8×8 NHWC stays ahead (29.3 against 31.9), and so does
#: ResNet-20 at 8×8. VGG-11's round: 1.16-1.29x the per-client loop, from 0.99-1.07x (docs/engine.md).
AUTO_NCHW_POSITIONS = 16


def channels_last_on(channels_last: bool | str, device: torch.device) -> bool:
    """The grouped activations' memory order on `device` for a model's `channels_last`: True (NHWC) or
    False (NCHW) as given; "auto" (the default) channels-last on the CPU, where oneDNN's convolutions and
    max-pooling run faster on it (docs/engine.md), and NCHW on CUDA (and the meta device, which measures
    a CUDA block), where cuDNN's grouped convolutions trained the McMahan CNNs' rounds of 64 clients 1.8-1.9x
    faster in NCHW on an H200, and VGG-11's and ResNet-20's at the same speed. Under "auto" the CPU's
    small maps are the exception (AUTO_NCHW_POSITIONS, Conv2d.takes_nchw)."""
    if channels_last not in LAYOUTS:
        raise ValueError(f"channels_last {channels_last!r} is unknown; allowed: true, false, auto")
    return device.type == "cpu" if channels_last == "auto" else bool(channels_last)


def is_channels_last(x: Tensor) -> bool:
    """x is channels-last (and not also contiguous, as with one channel)."""
    return x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()


def _layout_of(x: Tensor, t: Tensor) -> Tensor:
    """t in x's memory order."""
    return t.contiguous(memory_format=torch.channels_last) if is_channels_last(x) else t


class Conv2d(Layer):
    """Per-client 2-D convolution as ONE grouped convolution with groups = K.

    Weight [C_out, C_in, k, k] per client (and bias [C_out] unless bias=False); the stacked
    [K, C_out, C_in, k, k] is, reshaped, exactly the weight of conv2d(groups=K) on the grouped layout.
    The backward pass is aten.convolution_backward, the kernel autograd itself calls, so gradients match
    torch.nn.Conv2d. With K = 1 (a block of one client) it is a plain convolution.

    impl="unfold" computes the same convolution as im2col (X = unfold(x), [C_in·k², L] per sample and
    client, L output positions) and batched GEMMs: y = W_k X (forward), dW_k = Σ_b dY Xᵀ, dx = fold(W_kᵀ dY).
    Its kernel count does not grow with K, where a grouped convolution's may (cuDNN can run the groups one
    by one); it moves k² times the input's bytes. Two ways to batch the GEMMs, chosen per layer by the
    copies each makes (`per_client`):
    * over (sample, client), the im2col output as it is: each client's weights are broadcast over the B
      samples, a copy of B × the weights forward and again backward. Cheap where the weights are small
      and the positions many (the first layers);
    * one GEMM per client over its samples and positions side by side (X_k [C_in·k², B·L]): the columns
      and the output are reordered instead, copies of B·L·(2·C_in·k² + C_out) per client. Where the
      weights are large and the positions few (VGG-11's 512-channel layers: the broadcast would be 19 GB
      for one layer at 64 clients of 32 samples).
    impl="auto" (the default) takes unfold on CUDA for layers whose output has at most
    AUTO_UNFOLD_POSITIONS positions (16), in training on at most AUTO_UNFOLD_SAMPLES samples per client,
    and the grouped convolution elsewhere. There unfold beat cuDNN's grouped convolution on an H200
    (2.3-6.6× per layer at 64 clients; VGG-11's round 1.9-2.7×); no larger layer gained (docs/engine.md).
    On the CPU it once beat oneDNN's NHWC convolution on VGG-11's 2×2 layers; oneDNN's NCHW convolution,
    which "auto" now runs there (`takes_nchw`), beats both. Evaluation (training=False) runs the grouped
    convolution whatever impl says (`unfolds`).

    channels_last: the model's (models.cnn.ConvNet); under "auto" the grouped convolution of a small map
    on the CPU takes its input NCHW (`takes_nchw`).
    """

    def __init__(self, c_in: int, c_out: int, kernel: int, padding: int, hw_in: tuple[int, int],
                 stride: int = 1, bias: bool = True, impl: str = "grouped",
                 channels_last: bool | str = "auto") -> None:
        if impl not in CONV_IMPLS:
            raise ValueError(f"conv {impl!r} is unknown; allowed: {', '.join(CONV_IMPLS)}")
        channels_last_on(channels_last, torch.device("cpu"))  # an unknown value fails here
        self.c_in, self.c_out, self.kernel, self.padding = c_in, c_out, kernel, padding
        self.stride, self.bias, self.impl, self.channels_last = stride, bias, impl, channels_last
        self.hw_in = tuple(hw_in)
        self.hw_out = ((hw_in[0] + 2 * padding - kernel) // stride + 1,
                       (hw_in[1] + 2 * padding - kernel) // stride + 1)
        ck2, self.positions = c_in * kernel ** 2, self.hw_out[0] * self.hw_out[1]
        # unfold's GEMMs per client when reordering the columns copies less than broadcasting the weights
        self.per_client = self.positions * (2 * ck2 + c_out) < 2 * c_out * ck2
        self.shapes = ((c_out, c_in, kernel, kernel),) + (((c_out,),) if bias else ())
        self.trainable = (True,) * len(self.shapes)
        self.transposed = (False,) * len(self.shapes)

    def init_params(self, generator: torch.Generator) -> list[Tensor]:
        bound = 1 / math.sqrt(self.c_in * self.kernel ** 2)
        return [_uniform(shape, bound, generator) for shape in self.shapes]

    def _grouped(self, W: Tensor) -> Tensor:
        return W.reshape(W.shape[0] * self.c_out, self.c_in, self.kernel, self.kernel)

    def unfolds(self, x: Tensor, training: bool = True) -> bool:
        """Whether this layer computes as unfold on x (impl, or for "auto" the rule above); the backward
        pass asks with training's default. Never in evaluation, whatever impl says: it evaluates one model
        (K = 1), with nothing to batch, on chunks of thousands of samples whose im2col columns would be
        GBs (and `auto`'s measured gain is in the backward pass)."""
        if not training:
            return False
        if self.impl == "auto":
            most = AUTO_UNFOLD_POSITIONS["cpu" if x.device.type == "cpu" else "cuda"]
            return self.positions <= most and x.shape[0] <= AUTO_UNFOLD_SAMPLES
        return self.impl == "unfold"

    def takes_nchw(self, x: Tensor) -> bool:
        """The grouped convolution converts channels-last input x to NCHW: under channels_last "auto", on
        the CPU, for an output of at most AUTO_NCHW_POSITIONS positions."""
        return (self.channels_last == "auto" and x.device.type == "cpu"
                and self.positions <= AUTO_NCHW_POSITIONS and is_channels_last(x))

    def forward(self, p: list[Tensor], x: Tensor, training: bool) -> tuple[Tensor, Saved]:
        # saved: the input the kernels read, and whether the input gradient goes back channels-last
        if self.unfolds(x, training):
            return self._unfold_forward(p, x), (x, False)
        restore = self.takes_nchw(x)
        if restore:
            x = x.contiguous()
        W = p[0]
        b = p[1].reshape(-1) if self.bias else None
        return F.conv2d(x, self._grouped(W), b, self.stride, self.padding, 1, W.shape[0]), (x, restore)

    def _cols_by_sample(self, x: Tensor, K: int) -> Tensor:
        """im2col of the grouped input: [B, K, C_in·k², L] (a view of unfold's output)."""
        return self._im2col(x).view(x.shape[0], K, -1, self.positions)

    def _im2col(self, x: Tensor) -> Tensor:
        """F.unfold of the grouped input: [B, K·C_in·k², L]."""
        return F.unfold(x, self.kernel, 1, self.padding, self.stride)

    @staticmethod
    def _client_major(t: Tensor, K: int) -> Tensor:
        """[B, K·C, ...] (any memory order) → [K, C, B·L], each client's samples and positions side by side
        (one copy)."""
        t = t.unflatten(1, (K, -1)).flatten(3)  # [B, K, C, L]: views
        return t.permute(1, 2, 0, 3).reshape(K, t.shape[2], -1)

    def _cols(self, x: Tensor, K: int) -> Tensor:
        """im2col of the grouped input, client-major: [K, C_in·k², B·L] (L output positions)."""
        return self._client_major(self._im2col(x), K)

    def _unfold_forward(self, p: list[Tensor], x: Tensor) -> Tensor:
        W = p[0]
        K, B = W.shape[0], x.shape[0]
        if not self.per_client:
            y = torch.matmul(W.view(1, K, self.c_out, -1), self._cols_by_sample(x, K))  # [B, K, C_out, L]
            if self.bias:
                y.add_(p[1].view(1, K, self.c_out, 1))
            return _layout_of(x, y.view(B, K * self.c_out, *self.hw_out))
        y = torch.bmm(W.view(K, self.c_out, -1), self._cols(x, K))  # [K, C_out, B·L]
        if self.bias:
            y.add_(p[1].view(K, self.c_out, 1))
        # back to the grouped layout [B, K·C_out, H, W] in x's memory order, one copy (not a reshape, which
        # may return a view in neither order, e.g. with K = 1)
        y = y.view(K, self.c_out, B, *self.hw_out)
        if is_channels_last(x):
            y = y.permute(2, 3, 4, 0, 1).contiguous()  # [B, H, W, K, C_out]
            return y.view(B, *self.hw_out, K * self.c_out).permute(0, 3, 1, 2)
        return y.permute(2, 0, 1, 3, 4).contiguous().view(B, K * self.c_out, *self.hw_out)

    def _unfold_backward(self, p: list[Tensor], x: Tensor, dy: Tensor, need_dx: bool
                         ) -> tuple[Tensor | None, list[Tensor]]:
        W = p[0]
        K, B = W.shape[0], x.shape[0]
        d = self._client_major(dy, K)  # [K, C_out, B·L]
        # Σ over samples and positions, one GEMM per client: [K, C_out, B·L] · [K, B·L, C_in·k²]
        dW = torch.bmm(d, self._cols(x, K).transpose(1, 2))
        grads = [dW.view_as(W)] + ([d.sum(dim=2).view_as(p[1])] if self.bias else [])
        if not need_dx:
            return None, grads
        ck2 = self.c_in * self.kernel ** 2
        if not self.per_client:  # [B, K, C_in·k², L], as fold takes it
            dcols = torch.matmul(W.view(1, K, self.c_out, -1).transpose(2, 3),
                                 dy.reshape(B, K, self.c_out, -1))
            dx = F.fold(dcols.view(B, K * ck2, -1), self.hw_in, self.kernel, 1, self.padding, self.stride)
            return _layout_of(x, dx), grads
        dcols = torch.bmm(W.view(K, self.c_out, -1).transpose(1, 2), d)  # [K, C_in·k², B·L]
        dcols = dcols.view(K, ck2, B, -1).permute(2, 0, 1, 3).reshape(B, K * ck2, -1)
        dx = F.fold(dcols, self.hw_in, self.kernel, 1, self.padding, self.stride)
        return _layout_of(x, dx), grads

    def backward(self, p: list[Tensor], saved: Saved, dy: Tensor, need_dx: bool
                 ) -> tuple[Tensor | None, list[Tensor]]:
        x, restore = saved
        if self.unfolds(x):
            return self._unfold_backward(p, x, dy, need_dx)
        W = p[0]
        K = W.shape[0]
        dx, dW, db = torch.ops.aten.convolution_backward(
            dy, x, self._grouped(W), [K * self.c_out] if self.bias else None, [self.stride] * 2,
            [self.padding] * 2, [1, 1], False, [0, 0], K, [need_dx, True, self.bias])
        if restore and dx is not None:
            dx = dx.contiguous(memory_format=torch.channels_last)
        return dx, [dW.reshape(W.shape)] + ([db.view_as(p[1])] if self.bias else [])

    def make_modules(self) -> list[nn.Module]:
        return [nn.Conv2d(self.c_in, self.c_out, self.kernel, self.stride, self.padding, bias=self.bias)]

    def to_modules(self, p: list[Tensor], modules: list[nn.Module]) -> None:
        with torch.no_grad():
            for dst, src in zip(modules[0].parameters(), p, strict=True):
                dst.copy_(src)

    def from_modules(self, modules: list[nn.Module]) -> list[Tensor]:
        return [t.detach().clone() for t in modules[0].parameters()]

    def train_flops(self, batch: int, need_dx: bool) -> int:
        per_pass = 2 * batch * self.c_out * self.c_in * self.kernel ** 2 * self.hw_out[0] * self.hw_out[1]
        return per_pass * (3 if need_dx else 2)


class BatchNorm2d(Layer):
    """Per-client batch norm: batch statistics in training, running statistics in evaluation; optionally
    followed by ReLU (relu=True, as models.blocks.GroupNorm: He et al.'s ResNet normalises then rectifies).

    Parameters: weight [C], bias [C] (trainable) and running mean/var [C] (buffers, updated in place by
    local training as torch.nn.BatchNorm2d does, momentum 0.1, unbiased running variance). On the grouped
    layout, channel k·C + c is client k's channel c, so one native_batch_norm call is per-client BN. The
    ReLU is applied in place to the output; the backward pass needs the input, not the output, of the
    normalisation.
    """

    def __init__(self, channels: int, momentum: float = 0.1, eps: float = 1e-5, relu: bool = False) -> None:
        self.channels, self.momentum, self.eps, self.relu = channels, momentum, eps, relu
        self.shapes = ((channels,),) * 4
        self.trainable = (True, True, False, False)
        self.transposed = (False,) * 4

    def init_params(self, generator: torch.Generator) -> list[Tensor]:
        c = self.channels
        return [torch.ones(c), torch.zeros(c), torch.zeros(c), torch.ones(c)]

    def forward(self, p: list[Tensor], x: Tensor, training: bool) -> tuple[Tensor, Saved]:
        w, b, rm, rv = (t.view(-1) for t in p)  # views: the running statistics update lands in p
        if not training:
            y = F.batch_norm(x, rm, rv, w, b, False, 0.0, self.eps)
            return (y.relu_() if self.relu else y), None
        y, mean, invstd = torch.native_batch_norm(x, w, b, rm, rv, True, self.momentum, self.eps)
        if self.relu:
            y.relu_()
        return y, (x, mean, invstd, y if self.relu else None)

    def backward(self, p: list[Tensor], saved: Saved, dy: Tensor, need_dx: bool
                 ) -> tuple[Tensor | None, list[Tensor]]:
        w, b, rm, rv = p
        x, mean, invstd, y = saved
        if y is not None:
            dy = torch.ops.aten.threshold_backward(dy, y, 0)
        dx, dw, db = torch.ops.aten.native_batch_norm_backward(
            dy, x, w.view(-1), rm.view(-1), rv.view(-1), mean, invstd, True, self.eps, [need_dx, True, True])
        return dx, [dw.view_as(w), db.view_as(b), torch.zeros_like(rm), torch.zeros_like(rv)]

    def make_modules(self) -> list[nn.Module]:
        bn = nn.BatchNorm2d(self.channels, eps=self.eps, momentum=self.momentum)
        return [bn] + ([nn.ReLU()] if self.relu else [])

    def to_modules(self, p: list[Tensor], modules: list[nn.Module]) -> None:
        bn = modules[0]
        with torch.no_grad():
            for dst, src in zip((bn.weight, bn.bias, bn.running_mean, bn.running_var), p, strict=True):
                dst.copy_(src)

    def from_modules(self, modules: list[nn.Module]) -> list[Tensor]:
        bn = modules[0]
        return [t.detach().clone() for t in (bn.weight, bn.bias, bn.running_mean, bn.running_var)]


class PoolReLU(Layer):
    """ReLU then 2×2 max-pool, computed as pool then ReLU: max commutes with the monotone ReLU, and the
    gradient is the same (a window whose maximum is ≤ 0 gets zero gradient either way), but the ReLU and
    its mask then touch a 4× smaller tensor."""

    def forward(self, p: list[Tensor], x: Tensor, training: bool) -> tuple[Tensor, Saved]:
        if not training:
            return F.max_pool2d(x, 2).relu_(), None
        y, idx = torch.ops.aten.max_pool2d_with_indices(x, [2, 2], [2, 2])
        y.relu_()
        return y, (x, y, idx)

    def backward(self, p: list[Tensor], saved: Saved, dy: Tensor, need_dx: bool
                 ) -> tuple[Tensor | None, list[Tensor]]:
        x, y, idx = saved
        dy = torch.ops.aten.threshold_backward(dy, y, 0)
        return torch.ops.aten.max_pool2d_with_indices_backward(dy, x, [2, 2], [2, 2], [0, 0], [1, 1], False,
                                                               idx), []

    def make_modules(self) -> list[nn.Module]:
        return [nn.ReLU(), nn.MaxPool2d(2)]  # the research-code order


class Flatten(Layer):
    """Grouped [B, K·C, h, w] → [K, B, C·h·w] in torch's (C, h, w) flatten order (a copy for channels-last
    input); the input gradient comes back in the input's memory order."""

    def __init__(self, shape: tuple[int, int, int]) -> None:
        self.shape = shape

    def forward(self, p: list[Tensor], x: Tensor, training: bool) -> tuple[Tensor, Saved]:
        B = x.shape[0]
        K = x.shape[1] // self.shape[0]
        return x.reshape(B, K, -1).transpose(0, 1), is_channels_last(x)

    def backward(self, p: list[Tensor], saved: Saved, dy: Tensor, need_dx: bool
                 ) -> tuple[Tensor | None, list[Tensor]]:
        K, B = dy.shape[:2]
        C, h, w = self.shape
        dx = dy.transpose(0, 1).reshape(B, K * C, h, w)
        return (dx.contiguous(memory_format=torch.channels_last) if saved else dx), []

    def make_modules(self) -> list[nn.Module]:
        return [nn.Flatten()]


def dense_stack(dims: Sequence[int]) -> list[Layer]:
    """Linear layers dims[0] → dims[1] → … → dims[-1], ReLU after all but the last."""
    n = len(dims) - 1
    return [Linear(a, b, relu=i < n - 1) for i, (a, b) in enumerate(pairwise(dims))]
