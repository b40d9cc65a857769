"""A generic BatchedModel for any torch.nn module, through torch.func (see docs/engine.md).

The hand-written models (logreg, mlp, cnn) fuse their clients' steps into bmm/grouped convolutions. This
wrapper makes any module usable by the batched engine instead: each client's loss is the module run with
that client's parameters (`functional_call`), and `vmap(grad(loss))` maps it over the stacked client axis.
Clients go through in chunks of `chunk`, so that a big model (VGG-11, ResNet-20, a 2 × 256 LSTM) still runs
with bounded memory: the engine sees one grads() call, the wrapper makes ceil(K / chunk) of them.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.func import functional_call, grad, vmap
from torch.nn import functional as F


class FuncModel:
    """BatchedModel for the modules that `factory()` builds.

    params: the module's parameters in `named_parameters()` order (all trainable). The module must have
    no buffers (no BatchNorm running statistics: the zoo uses GroupNorm instead) and no randomness in its
    forward pass (no dropout), so that a client's step is a function of its parameters and minibatch.
    Inputs may be float (images) or int64 (token ids for the text models); they are passed as they are.
    """

    trainable: tuple[bool, ...]

    def __init__(self, name: str, factory: Callable[[], nn.Module], chunk: int = 16,
                 eval_chunk: int = 4096) -> None:
        if chunk < 1:
            raise ValueError(f"chunk must be at least 1, got {chunk}")
        self.name = name
        self.factory = factory
        self.chunk = int(chunk)
        self.eval_chunk = int(eval_chunk)
        module = factory()
        buffers = [n for n, _ in module.named_buffers()]
        if buffers:
            raise ValueError(f"FuncModel needs a module without buffers; {name} has {', '.join(buffers)}")
        self._names = tuple(n for n, _ in module.named_parameters())
        self._shapes = tuple(tuple(p.shape) for p in module.parameters())
        self.trainable = (True,) * len(self._names)
        # The template for functional_call: every parameter is replaced at each call, so its own values
        # (and device) never matter; on the meta device it holds no memory.
        self._template = module.to("meta")
        self._grad = vmap(grad(self._loss), in_dims=(0, 0, 0))

    def _loss(self, params: tuple[Tensor, ...], x: Tensor, y: Tensor) -> Tensor:
        out = functional_call(self._template, dict(zip(self._names, params, strict=True)), (x,))
        return F.cross_entropy(out, y)

    def init_params(self, generator: torch.Generator) -> list[Tensor]:
        """The module's own initialisation, seeded by a draw from `generator` (deterministic, and the
        global RNG is left as it was)."""
        seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            module = self.factory()
        return [p.detach().clone() for p in module.parameters()]

    def grads(self, params: list[Tensor], x: Tensor, y: Tensor) -> list[Tensor]:
        K = x.shape[0]
        if K <= self.chunk:
            return list(self._grad(tuple(params), x, y))
        parts = [self._grad(tuple(p[lo:lo + self.chunk] for p in params), x[lo:lo + self.chunk],
                            y[lo:lo + self.chunk]) for lo in range(0, K, self.chunk)]
        return [torch.cat([part[i] for part in parts]) for i in range(len(params))]

    def logits(self, params: list[Tensor], x: Tensor) -> Tensor:
        weights = dict(zip(self._names, params, strict=True))
        with torch.no_grad():
            outs = [functional_call(self._template, weights, (x[lo:lo + self.eval_chunk],))
                    for lo in range(0, max(len(x), 1), self.eval_chunk)]
        return outs[0] if len(outs) == 1 else torch.cat(outs)

    def make_module(self) -> nn.Module:
        return self.factory()

    def to_module(self, params: list[Tensor], module: nn.Module) -> None:
        with torch.no_grad():
            for p, v in zip(module.parameters(), params, strict=True):
                p.copy_(v)

    def from_module(self, module: nn.Module) -> list[Tensor]:
        return [p.detach().clone() for p in module.parameters()]

    def num_params(self) -> int:
        return sum(int(torch.Size(s).numel()) for s in self._shapes)
