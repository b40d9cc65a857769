"""Models built for their shapes only: on torch's meta device, with no initialiser run.

A tensor on the meta device holds no values, so filling it computes nothing; but torch's meta kernel of
``normal_`` is a Python reference that imports torch._dynamo on its first call, about 4 s of a process
(2 s with its bytecode compiled). nn.Embedding and the ResNet's kaiming_normal_ call it, so counting a
text model or a ResNet at the workflow's start (hetfl.cluster._meta_params) cost 7 s of every Snakemake
start, a cluster job's included, where the count itself takes milliseconds."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch.overrides import TorchFunctionMode

#: torch.nn.init's initialisers and the in-place tensor fills they call: on a meta tensor, none changes
#: anything but its values, which it does not have
INITIALISERS = frozenset(
    {name for name in vars(torch.nn.init) if name.endswith("_") and not name.startswith("_")}
    | {"normal_", "uniform_", "fill_", "zero_", "random_", "bernoulli_", "exponential_", "geometric_",
       "log_normal_", "cauchy_"})


class _SkipInitialisers(TorchFunctionMode):
    """Returns an initialiser's meta tensor as it is, without calling the initialiser."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__name__", None) in INITIALISERS:
            tensor = args[0] if args else kwargs.get("tensor")
            if isinstance(tensor, torch.Tensor) and tensor.is_meta:
                return tensor
        return func(*args, **kwargs)


@contextlib.contextmanager
def shapes_only() -> Iterator[None]:
    """Tensors made inside are on the meta device, and their initialisers are skipped: a model built
    here has its parameters' shapes, without memory or values."""
    with torch.device("meta"), _SkipInitialisers():
        yield
