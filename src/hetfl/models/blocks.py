"""Batched layers of the zoo's residual and VGG networks, on the grouped layout [B, K·C, H, W].

Same contract as models.layers (forward / backward / sgd_backward, no autograd): GroupNorm (+ ReLU),
ReLU, max-pooling, global average pooling and He et al.'s basic residual block with the parameter-free
option-A shortcut, normalised by GroupNorm or by models.layers.BatchNorm2d (`norm_layer`). Every backward
pass is the ATen kernel autograd itself calls (native_group_norm_backward, native_batch_norm_backward,
threshold_backward, max_pool2d_with_indices_backward, convolution_backward), so gradients match torch.nn
to float rounding.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from hetfl.models.layers import BatchNorm2d, Conv2d, Layer, Saved, is_channels_last


def _channels_last(x: Tensor) -> Tensor:
    return x.contiguous(memory_format=torch.channels_last)


def _norm_layout(t: Tensor) -> Tensor:
    """t in a memory layout native_group_norm takes: on the CPU either layout (the convolutions hand it
    channels-last), on CUDA only the contiguous one, as aten.group_norm (torch.nn.GroupNorm) makes it."""
    return t if t.device.type == "cpu" else t.contiguous()


class GroupNorm(Layer):
    """Per-client GroupNorm of `channels` channels in `groups` groups, optionally followed by ReLU.

    On the grouped layout client k owns channels k·C … k·C+C−1, so its groups are groups k·G … k·G+G−1
    of a GroupNorm with K·G groups over the K·C channels: one native_group_norm call normalises every
    client (per sample, as GroupNorm does: there are no running statistics). The ReLU is applied in place
    to the output; the backward pass needs the input, not the output, of the normalisation.
    """

    def __init__(self, channels: int, groups: int, relu: bool, eps: float = 1e-5) -> None:
        if channels % groups:
            raise ValueError(f"GroupNorm: {channels} channels do not split into {groups} groups")
        self.channels, self.groups, self.relu, self.eps = channels, groups, relu, eps
        self.shapes = ((channels,), (channels,))
        self.trainable = (True, True)
        self.transposed = (False, False)

    def init_params(self, generator: torch.Generator) -> list[Tensor]:
        return [torch.ones(self.channels), torch.zeros(self.channels)]

    def forward(self, p: list[Tensor], x: Tensor, training: bool) -> tuple[Tensor, Saved]:
        w, b = p
        K = w.shape[0]
        B, KC, H, W = x.shape
        x = _norm_layout(x)
        y, mean, rstd = torch.native_group_norm(x, w.reshape(-1), b.reshape(-1), B, KC, H * W,
                                                K * self.groups, self.eps)
        if self.relu:
            y.relu_()
        return y, (x, mean, rstd, y if self.relu else None)

    def backward(self, p: list[Tensor], saved: Saved, dy: Tensor, need_dx: bool
                 ) -> tuple[Tensor | None, list[Tensor]]:
        w, b = p
        x, mean, rstd, y = saved
        K = w.shape[0]
        B, KC, H, W = x.shape
        if y is not None:
            dy = torch.ops.aten.threshold_backward(dy, y, 0)
        dx, dw, db = torch.ops.aten.native_group_norm_backward(_norm_layout(dy), x, mean, rstd, w.reshape(-1),
                                                               B, KC, H * W, K * self.groups,
                                                               [need_dx, True, True])
        return dx, [dw.view_as(w), db.view_as(b)]


#: the ResNets' normalisations (models.zoo, `norm`): "group" (GroupNorm, the default) or "batch" (He et al.)
NORMS = ("group", "batch")


def norm_layer(norm: str, channels: int, groups: int, relu: bool) -> Layer:
    """The normalisation of a ResNet's convolution: GroupNorm(groups) or per-client BatchNorm2d (which has
    no groups: its running statistics are buffers, `trainable` False), optionally followed by ReLU."""
    if norm == "group":
        return GroupNorm(channels, groups, relu=relu)
    if norm == "batch":
        return BatchNorm2d(channels, relu=relu)
    raise ValueError(f"norm {norm!r} is unknown; allowed: {', '.join(NORMS)}")


class ReLU(Layer):
    """In place on its input (which no other layer keeps); the backward pass reads the output."""

    def forward(self, p: list[Tensor], x: Tensor, training: bool) -> tuple[Tensor, Saved]:
        y = x.relu_()
        return y, y

    def backward(self, p: list[Tensor], saved: Saved, dy: Tensor, need_dx: bool
                 ) -> tuple[Tensor | None, list[Tensor]]:
        return torch.ops.aten.threshold_backward(dy, saved, 0), []


class MaxPool(Layer):
    """2×2 max-pooling, stride 2 (per channel, so per client on the grouped layout)."""

    def forward(self, p: list[Tensor], x: Tensor, training: bool) -> tuple[Tensor, Saved]:
        if not training:
            return F.max_pool2d(x, 2), None
        y, idx = torch.ops.aten.max_pool2d_with_indices(x, [2, 2], [2, 2])
        return y, (x, idx)

    def backward(self, p: list[Tensor], saved: Saved, dy: Tensor, need_dx: bool
                 ) -> tuple[Tensor | None, list[Tensor]]:
        x, idx = saved
        return torch.ops.aten.max_pool2d_with_indices_backward(dy, x, [2, 2], [2, 2], [0, 0], [1, 1], False,
                                                               idx), []


class GlobalAvgPool(Layer):
    """Grouped [B, K·C, h, w] → the mean over positions, as [K, B, C] for the fully connected layers."""

    def __init__(self, channels: int) -> None:
        self.channels = channels

    def forward(self, p: list[Tensor], x: Tensor, training: bool) -> tuple[Tensor, Saved]:
        B, KC, h, w = x.shape
        y = x.mean(dim=(2, 3)).view(B, KC // self.channels, self.channels).transpose(0, 1)
        return y, (h, w, is_channels_last(x))

    def backward(self, p: list[Tensor], saved: Saved, dy: Tensor, need_dx: bool
                 ) -> tuple[Tensor | None, list[Tensor]]:
        h, w, cl = saved  # the input gradient in the input's memory order
        K, B, C = dy.shape
        dx = dy.transpose(0, 1).reshape(B, K * C, 1, 1).div(h * w).expand(B, K * C, h, w)
        return (_channels_last(dx) if cl else dx.contiguous()), []


class Residual(Layer):
    """He et al. (2016) basic block: conv3×3 (stride s) → norm → ReLU → conv3×3 → norm, plus the shortcut,
    → ReLU; norm is GroupNorm (norm="group") or batch norm (norm="batch", He et al.'s). Parameters (as
    torch's BasicBlock lists them): conv1 W, norm1 w, b, conv2 W, norm2 w, b; with batch norm each norm's
    w, b are followed by its running mean and variance (buffers, `trainable` False).

    The shortcut is the identity, or when the shape changes He et al.'s option A: the input subsampled
    by the stride and zero-padded with (C_out − C_in)/2 channels on each side (per client). It has no
    parameters, so it is added in place into the block's output (forward) and into the input gradient
    (backward), never materialised.
    """

    def __init__(self, c_in: int, c_out: int, stride: int, groups: int, hw_in: tuple[int, int],
                 conv: str = "auto", norm: str = "group", channels_last: bool | str = "auto") -> None:
        self.c_in, self.c_out, self.stride = c_in, c_out, stride
        self.conv1 = Conv2d(c_in, c_out, 3, 1, hw_in, stride=stride, bias=False, impl=conv,
                            channels_last=channels_last)
        self.norm1 = norm_layer(norm, c_out, groups, relu=True)
        self.conv2 = Conv2d(c_out, c_out, 3, 1, self.conv1.hw_out, bias=False, impl=conv,
                            channels_last=channels_last)
        self.norm2 = norm_layer(norm, c_out, groups, relu=False)
        self.parts = (self.conv1, self.norm1, self.conv2, self.norm2)
        self.hw_out = self.conv2.hw_out
        self.shapes = tuple(s for part in self.parts for s in part.shapes)
        self.trainable = tuple(t for part in self.parts for t in part.trainable)
        self.transposed = (False,) * len(self.shapes)
        # each part's slice of the block's parameter list
        ends = [0]
        for part in self.parts:
            ends.append(ends[-1] + len(part.shapes))
        self._slices = [slice(a, b) for a, b in zip(ends[:-1], ends[1:], strict=True)]
        self.pad = (c_out - c_in) // 2  # option A: channels of zeros before the input's channels

    def init_params(self, generator: torch.Generator) -> list[Tensor]:
        return [t for part in self.parts for t in part.init_params(generator)]

    def _split(self, p: list[Tensor]) -> list[list[Tensor]]:
        return [p[s] for s in self._slices]

    def _shortcut_view(self, t: Tensor, channels: int) -> Tensor:
        """t [B, K·channels, h, w] viewed as [B, K, channels, h, w] (a view: only the channel axis splits)."""
        B, KC, h, w = t.shape
        return t.view(B, KC // channels, channels, h, w)

    def forward(self, p: list[Tensor], x: Tensor, training: bool) -> tuple[Tensor, Saved]:
        saved = []
        out = x
        for part, q in zip(self.parts, self._split(p), strict=True):
            out, s = part.forward(q, out, training)
            saved.append(s)
        if self.stride == 1 and self.c_in == self.c_out:
            out.add_(x)
        else:
            short = x[:, :, ::self.stride, ::self.stride]
            self._shortcut_view(out, self.c_out)[:, :, self.pad:self.pad + self.c_in].add_(
                self._shortcut_view(short, self.c_in))
        out.relu_()
        return out, (saved, out)

    def _backward(self, p: list[Tensor], saved: Saved, dy: Tensor, need_dx: bool, lr: float | None
                  ) -> tuple[Tensor | None, list[Tensor]]:
        parts_saved, out = saved
        d = torch.ops.aten.threshold_backward(dy, out, 0)
        grads: list[list[Tensor]] = [[] for _ in self.parts]
        dx = d
        for i in range(len(self.parts) - 1, -1, -1):
            part, q = self.parts[i], self._split(p)[i]
            need = need_dx or i > 0
            if lr is None:
                dx, grads[i] = part.backward(q, parts_saved[i], dx, need)
            else:
                dx = part.sgd_backward(q, parts_saved[i], dx, need, lr)
        if need_dx:
            if self.stride == 1 and self.c_in == self.c_out:
                dx.add_(d)
            else:
                self._shortcut_view(dx, self.c_in)[:, :, :, ::self.stride, ::self.stride].add_(
                    self._shortcut_view(d, self.c_out)[:, :, self.pad:self.pad + self.c_in])
        return dx, [g for gs in grads for g in gs]

    def backward(self, p: list[Tensor], saved: Saved, dy: Tensor, need_dx: bool
                 ) -> tuple[Tensor | None, list[Tensor]]:
        return self._backward(p, saved, dy, need_dx, None)

    def sgd_backward(self, p: list[Tensor], saved: Saved, dy: Tensor, need_dx: bool, lr: float
                     ) -> Tensor | None:
        return self._backward(p, saved, dy, need_dx, lr)[0]

    def train_flops(self, batch: int, need_dx: bool) -> int:
        return self.conv1.train_flops(batch, need_dx) + self.conv2.train_flops(batch, True)
