"""Batched embedding and LSTM layers with hand-written backpropagation through time (the LEAF text models).

Same contract as models.layers. Sequences are kept client-major and time-major within a client,
[K, T, B, ·], so the slice of time step t, [K, B, ·], holds each client's minibatch contiguously (one
batched matmul per step for all clients) and a layer's whole output sequence is a [K, T·B, ·] view (one
batched matmul for the next layer's input projection).

LSTM (gates i, f, g, o, as torch.nn.LSTM): with z_t = W_ih x_t + b_ih + W_hh h_{t−1} + b_hh,
    i, f, o = σ(z_i), σ(z_f), σ(z_o);  g = tanh(z_g);  c_t = f ⊙ c_{t−1} + i ⊙ g;  h_t = o ⊙ tanh(c_t).
Backward, from t = T−1 down (dh_t: from the layer above and from step t+1; dc from step t+1):
    dc_t += dh_t ⊙ o ⊙ (1 − tanh²c_t);  dz = [dc_t ⊙ g ⊙ i(1−i), dc_t ⊙ c_{t−1} ⊙ f(1−f),
    dc_t ⊙ i ⊙ (1 − g²), dh_t ⊙ tanh c_t ⊙ o(1−o)];  dh_{t−1} = dz W_hh;  dc_{t−1} = dc_t ⊙ f.
Only dh_{t−1} is sequential; the weight gradients Σ_t dzᵀ h_{t−1} and Σ_t dzᵀ x_t, and the input gradient
dz W_ih, are each ONE large batched matmul over all steps after the loop (autograd does a small one per
step). Weights are stored as torch stores them ([4H, in], [4H, H]), so state dicts are interchangeable.

One client at a time takes the fused kernel torch.nn.LSTM trains with: oneDNN's on the CPU (called
directly), cuDNN's on CUDA (through autograd, for small rounds: engine.executor).

`cell="fused"` (a model parameter, the default) computes each time step's gates, c_t and h_t on CUDA with
torch's fused LSTM-cell kernels, the ones torch.nn.LSTMCell runs there (`aten._thnn_fused_lstm_cell` and
its backward): per step of all clients one matmul and one kernel forward, one kernel, one matmul and one
add backward, where the element-wise ops above (`cell="ops"`) launch about 7 and 23. The same arithmetic
(RNN.cu); the CPU has no such kernels and computes `fused` as the ops. On an H200 a round of 64 clients
trained 2.5-3.9x faster than with the ops (docs/engine.md, "On a GPU").
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

import torch
from torch import Tensor

from hetfl.models.layers import Layer, Saved

_LSTM_MODE = 2  # ATen's RNN mode code for LSTM (mkldnn_rnn_layer)
LSTM_CELLS = ("fused", "ops")  # how the batched recurrence computes a time step (LSTMLayer's `cell`)


class OneDNNSaved(NamedTuple):
    """What oneDNN's LSTM backward needs: its input, outputs and workspace, and the zero initial state."""

    x: Tensor
    out: Tensor
    hy: Tensor
    cy: Tensor
    work: Tensor
    h0: Tensor


def _onednn(x: Tensor) -> bool:
    """One client on the CPU: oneDNN's fused LSTM (what torch.nn.LSTM runs there) beats the batched
    recurrence, whose 10-row matmuls and gate kernels it fuses; blocks of clients use the recurrence."""
    return x.device.type == "cpu" and x.shape[0] == 1 and x.dtype == torch.float32 and \
        torch.backends.mkldnn.is_available()


def _cudnn(x: Tensor) -> bool:
    """One client on CUDA: cuDNN's fused LSTM, through autograd (how torch.nn.LSTM trains there).
    engine.executor trains rounds of fewer than the model's `cuda_batched_from` (3) clients client by
    client on this path: on an H200 a batched round of 2 ran 0.71-0.75x as fast (models.zoo.CharLSTM)."""
    return x.device.type == "cuda" and x.shape[0] == 1 and torch.backends.cudnn.is_available()


@contextmanager
def _unflattened_weights_ok() -> Iterator[None]:
    """cuDNN warns that weights outside one flat buffer are copied into one at every call: here that is
    one client's layer (1 MB for the char-LSTM's), per call, by design (the weights are rows of a stack).
    CUDA runs have no worker threads, so the process-wide warning filter is safe to change here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="RNN module weights are not part of single contiguous")
        yield


def _fused_cells(x: Tensor) -> bool:
    """Where torch has its fused LSTM-cell kernels: CUDA; and the meta device, where LayerNet.client_bytes
    measures what a CUDA block's forward pass saves (their meta functions give the shapes)."""
    return x.device.type in ("cuda", "meta")


def _cell_forward(gates_x: Tensor, gates_h: Tensor, c: Tensor, bias: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """One time step of K·B rows: (h_t, c_t, [σ(i), σ(f), tanh(g), σ(o)]) from the gates' two parts
    [K·B, 4H] and c_{t−1} [K·B, H]. `bias` [4H] is added twice (as b_ih and b_hh): the kernel's biases are
    shared by all rows, so the clients' own biases are in gates_x and this one is zero."""
    return torch.ops.aten._thnn_fused_lstm_cell(gates_x, gates_h, c, bias, bias)


def _cell_backward(dh: Tensor, dc: Tensor | None, c_prev: Tensor, c: Tensor, acts: Tensor
                   ) -> tuple[Tensor, Tensor]:
    """(dL/dz_t [K·B, 4H], dL/dc_{t−1}) from dh_t, dc_t (None at the last step), c_{t−1}, c_t and the
    step's activations: the backward of the module docstring, as one kernel."""
    dz, dc_prev, _ = torch.ops.aten._thnn_fused_lstm_cell_backward_impl(dh, dc, c_prev, c, acts, False)
    return dz, dc_prev


class FusedSaved(NamedTuple):
    """The fused-cell recurrence's forward: per time step [K·B, ·] the activations and c_0 … c_T; h_0 … h_T
    stacked client-major [K, T + 1, B, H], as the ops path keeps them (the layer's output is a view)."""

    x: Tensor
    acts: list[Tensor]
    hs: Tensor
    cs: list[Tensor]


class AutogradSaved(NamedTuple):
    """The fused kernel's graph: its input and weights (leaves) and the output that reaches the loss."""

    x: Tensor
    weights: list[Tensor]
    out: Tensor


class Embedding(Layer):
    """Token ids [K, B, T] → vectors [K, T, B, E] (client-major, time-major); weight [V, E] per client.

    The SGD step touches only the rows the minibatch used: w ← w − lr·Σ (one index_add_ into the stack),
    where autograd + torch.optim.SGD write and apply a dense [V, E] gradient (Sent140: 1M entries)."""

    def __init__(self, vocab: int, dim: int, steps: int = 1) -> None:
        self.vocab, self.dim, self.steps = vocab, dim, steps
        self.shapes = ((vocab, dim),)
        self.trainable = (True,)
        self.transposed = (False,)

    def init_params(self, generator: torch.Generator) -> list[Tensor]:
        return [torch.randn(self.vocab, self.dim, generator=generator)]

    def forward(self, p: list[Tensor], x: Tensor, training: bool) -> tuple[Tensor, Saved]:
        W = p[0]
        K, B, T = x.shape
        rows = (x.transpose(1, 2) + torch.arange(K, device=x.device).view(K, 1, 1) * self.vocab).reshape(-1)
        out = W.reshape(K * self.vocab, self.dim).index_select(0, rows).view(K, T, B, self.dim)
        return out, rows

    def backward(self, p: list[Tensor], saved: Saved, dy: Tensor, need_dx: bool
                 ) -> tuple[Tensor | None, list[Tensor]]:
        W = p[0]
        grad = torch.zeros_like(W).view(-1, self.dim).index_add_(0, saved, dy.reshape(-1, self.dim))
        return None, [grad.view_as(W)]

    def sgd_backward(self, p: list[Tensor], saved: Saved, dy: Tensor, need_dx: bool, lr: float
                     ) -> Tensor | None:
        p[0].view(-1, self.dim).index_add_(0, saved, dy.reshape(-1, self.dim), alpha=-lr)
        return None

    def step_bytes(self, batch: int) -> int:
        """Only the rows a minibatch of `batch` sequences of `steps` tokens can touch."""
        return 2 * 4 * min(self.vocab, batch * self.steps) * self.dim


class LSTMLayer(Layer):
    """One LSTM layer over [K, T, B, in] → every step's h [K, T, B, H] (or, `last`, only h_T [K, B, H]).

    Parameters as torch.nn.LSTM's layer: weight_ih [4H, in], weight_hh [4H, H], bias_ih, bias_hh [4H],
    initialised U(±1/√H)."""

    def __init__(self, d_in: int, hidden: int, last: bool, steps: int = 1, cell: str = "fused") -> None:
        if cell not in LSTM_CELLS:
            raise ValueError(f"cell {cell!r} is unknown; allowed: {', '.join(LSTM_CELLS)}")
        self.d_in, self.hidden, self.last, self.steps, self.cell = d_in, hidden, last, steps, cell
        H = hidden
        self.shapes = ((4 * H, d_in), (4 * H, H), (4 * H,), (4 * H,))
        self.trainable = (True,) * 4
        self.transposed = (False,) * 4

    def init_params(self, generator: torch.Generator) -> list[Tensor]:
        bound = 1 / math.sqrt(self.hidden)
        return [torch.rand(s, generator=generator).mul_(2 * bound).sub_(bound) for s in self.shapes]

    def forward(self, p: list[Tensor], x: Tensor, training: bool) -> tuple[Tensor, Saved]:
        if _onednn(x):
            return self._onednn_forward(p, x, training)
        if _cudnn(x):
            return self._autograd_forward(p, x, training)
        if self.cell == "fused" and _fused_cells(x):
            return self._fused_forward(p, x)
        w_hh = p[1]
        K, T, B, _ = x.shape
        H = self.hidden
        z_in = self._input_part(p, x).view(K, T, B, 4 * H)
        acts = torch.empty_like(z_in)  # σ(i), σ(f), tanh(g), σ(o) of every step
        hs = x.new_zeros(K, T + 1, B, H)  # h_0 = 0, h_1 … h_T
        cs = x.new_zeros(K, T + 1, B, H)
        tanh_c = x.new_empty(K, T, B, H)
        w_hh_t = w_hh.transpose(1, 2)
        for t in range(T):
            z = torch.baddbmm(z_in[:, t], hs[:, t], w_hh_t)
            a = acts[:, t]
            torch.sigmoid(z, out=a)
            torch.tanh(z[..., 2 * H:3 * H], out=a[..., 2 * H:3 * H])
            c = cs[:, t + 1]
            torch.mul(a[..., H:2 * H], cs[:, t], out=c)
            c.addcmul_(a[..., :H], a[..., 2 * H:3 * H])
            torch.tanh(c, out=tanh_c[:, t])
            torch.mul(a[..., 3 * H:], tanh_c[:, t], out=hs[:, t + 1])
        out = hs[:, T] if self.last else hs[:, 1:]
        return out, (x, acts, hs, cs, tanh_c)

    def _input_part(self, p: list[Tensor], x: Tensor) -> Tensor:
        """W_ih x_t + b_ih + b_hh of every step at once: [K, T·B, 4H]."""
        w_ih, _, b_ih, b_hh = p
        K, T, B, _ = x.shape
        return torch.baddbmm((b_ih + b_hh).unsqueeze(1), x.reshape(K, T * B, self.d_in), w_ih.transpose(1, 2))

    def _dz(self, p: list[Tensor], saved: Saved, dy: Tensor) -> Tensor:
        """dL/dz of every step [K, T, B, 4H] (the sequential part of the backward pass)."""
        if isinstance(saved, FusedSaved):
            return self._fused_dz(p, saved, dy)
        w_hh = p[1]
        x, acts, hs, cs, tanh_c = saved
        K, T, B, _ = x.shape
        H = self.hidden
        dz = torch.empty_like(acts)
        dh = dy if self.last else dy[:, T - 1].clone()
        dc = torch.zeros_like(dh)
        for t in range(T - 1, -1, -1):
            a = acts[:, t]
            i, f, g, o = a[..., :H], a[..., H:2 * H], a[..., 2 * H:3 * H], a[..., 3 * H:]
            tc = tanh_c[:, t]
            # dc += dh ⊙ o ⊙ (1 − tanh² c)
            dc.addcmul_(dh * o, 1 - tc * tc)
            d = dz[:, t]
            torch.mul(dh * tc, o * (1 - o), out=d[..., 3 * H:])
            torch.mul(dc * g, i * (1 - i), out=d[..., :H])
            torch.mul(dc * cs[:, t], f * (1 - f), out=d[..., H:2 * H])
            torch.mul(dc * i, 1 - g * g, out=d[..., 2 * H:3 * H])
            if t:
                dc.mul_(f)
                dh = torch.bmm(d, w_hh)
                if not self.last:
                    dh.add_(dy[:, t - 1])
        return dz

    def _param_grads(self, saved: Saved, dz: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        x, hs = saved[0], saved[2]
        K, T, B, _ = x.shape
        dz2 = dz.view(K, T * B, -1)
        return dz2, x.reshape(K, T * B, self.d_in), hs[:, :T].reshape(K, T * B, self.hidden), \
            dz2.sum(dim=1), dz2.transpose(1, 2)

    def backward(self, p: list[Tensor], saved: Saved, dy: Tensor, need_dx: bool
                 ) -> tuple[Tensor | None, list[Tensor]]:
        if isinstance(saved, (OneDNNSaved, AutogradSaved)):
            dx, *grads = self._fused_backward(p, saved, dy)
            return (dx if need_dx else None), [g.unsqueeze(0) for g in grads]
        w_ih = p[0]
        dz = self._dz(p, saved, dy)
        dz2, x2, h2, db, dz_t = self._param_grads(saved, dz)
        dx = torch.bmm(dz2, w_ih).view(*saved[0].shape) if need_dx else None
        return dx, [torch.bmm(dz_t, x2), torch.bmm(dz_t, h2), db, db.clone()]

    def sgd_backward(self, p: list[Tensor], saved: Saved, dy: Tensor, need_dx: bool, lr: float
                     ) -> Tensor | None:
        w_ih, w_hh, b_ih, b_hh = p
        if isinstance(saved, (OneDNNSaved, AutogradSaved)):
            dx, *grads = self._fused_backward(p, saved, dy)
            for w, g in zip(p, grads, strict=True):
                w[0].sub_(g, alpha=lr)
            return dx
        dz = self._dz(p, saved, dy)
        dz2, x2, h2, db, dz_t = self._param_grads(saved, dz)
        dx = torch.bmm(dz2, w_ih).view(*saved[0].shape) if need_dx else None  # before W_ih moves
        w_ih.baddbmm_(dz_t, x2, alpha=-lr)
        w_hh.baddbmm_(dz_t, h2, alpha=-lr)
        b_ih.sub_(db, alpha=lr)
        b_hh.sub_(db, alpha=lr)
        return dx

    # -- blocks of clients on CUDA with cell="fused": torch's fused LSTM-cell kernels, one per step --------
    def _fused_forward(self, p: list[Tensor], x: Tensor) -> tuple[Tensor, FusedSaved]:
        w_hh = p[1]
        K, T, B, _ = x.shape
        H = self.hidden
        z_in = self._input_part(p, x)
        # time-major: step t's gates of all clients are one contiguous [K·B, 4H] block, as the kernel takes
        z_in = z_in.view(K, T, B, 4 * H).transpose(0, 1).contiguous().view(T, K * B, 4 * H)
        bias = x.new_zeros(4 * H)
        w_hh_t = w_hh.transpose(1, 2)
        h, c = x.new_zeros(K * B, H), x.new_zeros(K * B, H)
        hs, cs, acts = [h], [c], []
        for t in range(T):
            # h_0 = 0: W_hh h_0 is zeros, as the ops path's product with zeros
            gates_h = (torch.bmm(h.view(K, B, H), w_hh_t).view(K * B, 4 * H) if t
                       else torch.zeros_like(z_in[0]))
            h, c, a = _cell_forward(z_in[t], gates_h, c, bias)
            hs.append(h)
            cs.append(c)
            acts.append(a)
        hs_all = torch.stack([t.view(K, B, H) for t in hs], dim=1)
        return (hs_all[:, T] if self.last else hs_all[:, 1:]), FusedSaved(x, acts, hs_all, cs)

    def _fused_dz(self, p: list[Tensor], saved: FusedSaved, dy: Tensor) -> Tensor:
        w_hh = p[1]
        K, T, B, _ = saved.x.shape
        H = self.hidden
        dzs: list[Tensor] = []
        dh = (dy if self.last else dy[:, T - 1]).reshape(K * B, H)
        dc = None
        for t in range(T - 1, -1, -1):
            dz, dc = _cell_backward(dh, dc, saved.cs[t], saved.cs[t + 1], saved.acts[t])
            dzs.append(dz.view(K, B, 4 * H))
            if t:
                dh = torch.bmm(dzs[-1], w_hh)
                if not self.last:
                    dh.add_(dy[:, t - 1])
                dh = dh.view(K * B, H)
        return torch.stack(dzs[::-1], dim=1)

    # -- one client on the CPU: oneDNN's fused LSTM kernels, the ones torch.nn.LSTM trains with -----------
    def _onednn_forward(self, p: list[Tensor], x: Tensor, training: bool) -> tuple[Tensor, Saved]:
        w_ih, w_hh, b_ih, b_hh = (t[0] for t in p)
        _, T, B, _ = x.shape
        h0 = x.new_zeros(B, self.hidden)
        xt = x[0]  # [T, B, in]: time-major, as the kernel takes it
        out, hy, cy, work = torch.ops.aten.mkldnn_rnn_layer(
            xt, w_ih, w_hh, b_ih, b_hh, h0, h0, False, [], _LSTM_MODE, self.hidden, 1, True, False, True,
            training)
        saved = OneDNNSaved(xt, out, hy, cy, work, h0)
        return (hy.unsqueeze(0) if self.last else out.unsqueeze(0)), saved

    def _onednn_backward(self, p: list[Tensor], saved: OneDNNSaved, dy: Tensor) -> list[Tensor]:
        """[dx [1, T, B, in], dW_ih, dW_hh, db_ih, db_hh] (the weight gradients unstacked)."""
        w_ih, w_hh, b_ih, b_hh = (t[0] for t in p)
        if self.last:  # only h_T reaches the loss
            grad_out = torch.zeros_like(saved.out)
            grad_out[-1] = dy[0]
        else:
            grad_out = dy[0]
        dx, dw_ih, dw_hh, db_ih, db_hh, _, _ = torch.ops.aten.mkldnn_rnn_layer_backward(
            saved.x, w_ih, w_hh, b_ih, b_hh, saved.h0, saved.h0, saved.out, saved.hy, saved.cy, grad_out,
            None, None, False, _LSTM_MODE, self.hidden, 1, True, True, False, [], True, saved.work)
        return [dx.unsqueeze(0), dw_ih, dw_hh, db_ih, db_hh]

    def _fused_backward(self, p: list[Tensor], saved: OneDNNSaved | AutogradSaved, dy: Tensor
                        ) -> list[Tensor]:
        if isinstance(saved, OneDNNSaved):
            return self._onednn_backward(p, saved, dy)
        return self._autograd_backward(saved, dy)

    # -- one client on CUDA: torch's fused LSTM (cuDNN) under autograd, as torch.nn.LSTM -----------------
    def _autograd_forward(self, p: list[Tensor], x: Tensor, training: bool) -> tuple[Tensor, Saved]:
        xt = x[0]  # [T, B, in]: time-major, as the kernel takes it
        h0 = xt.new_zeros(1, xt.shape[1], self.hidden)
        if not training:
            with torch.no_grad(), _unflattened_weights_ok():
                weights = [t[0] for t in p]
                out, hy, _ = torch._VF.lstm(xt, (h0, h0), weights, True, 1, 0.0, False, False, False)
            return (hy if self.last else out.unsqueeze(0)), None  # hy [1, B, H]: its layer axis is K = 1
        with torch.enable_grad(), _unflattened_weights_ok():
            # `.data`, not `.detach()`: a detached view shares the whole stack's version counter, so another
            # block's update (other rows, between this forward and its backward) made autograd refuse this
            # graph. Nothing writes these rows before their gradients are taken (sgd_backward).
            weights = [t[0].data.requires_grad_() for t in p]
            xt = xt.detach().requires_grad_()
            out, hy, _ = torch._VF.lstm(xt, (h0, h0), weights, True, 1, 0.0, True, False, False)
        reach = hy[0] if self.last else out  # what the layer above sees: h_T [B, H], or every h [T, B, H]
        return reach.detach().unsqueeze(0), AutogradSaved(xt, weights, reach)

    @staticmethod
    def _autograd_backward(saved: AutogradSaved, dy: Tensor) -> list[Tensor]:
        """[dx [1, T, B, in], dW_ih, dW_hh, db_ih, db_hh] (the weight gradients unstacked)."""
        dx, *grads = torch.autograd.grad(saved.out, [saved.x, *saved.weights], dy[0])
        return [dx.unsqueeze(0), *grads]

    def train_flops(self, batch: int, need_dx: bool) -> int:
        """Per sample and time step (`steps` of them): forward z (4H·(in + H)), dh (4H·H), the weight
        gradients (4H·(in + H)) and the input gradient (4H·in), 2 FLOPs per multiply-add."""
        h4 = 4 * self.hidden
        return 2 * batch * self.steps * (2 * h4 * (self.d_in + self.hidden) + h4 * self.hidden
                                         + (h4 * self.d_in if need_dx else 0))
