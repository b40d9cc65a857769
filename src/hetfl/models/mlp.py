"""Multilayer perceptron: McMahan et al. (2017) "2NN" (784-200-200-10) and FedDyn's 200-100 variant
(Acar et al., 2021), with ReLU hidden layers; hidden sizes are configurable."""

from __future__ import annotations

import math
from collections.abc import Sequence

from hetfl.models.layers import FlattenInput, dense_stack
from hetfl.models.net import LayerNet


class MLP(LayerNet):
    """Fully connected ReLU network; parameters [W₁ [in, h₁], b₁, …, W_L [h_{L−1}, C], b_L].

    Local SGD uses the fused step (LayerNet.sgd_step): per layer one batched matmul for the input
    gradient and one in-place `baddbmm_` that adds −lr·xᵀδ to the weights, no autograd, no gradient
    tensors. At batch 10 a 2NN step does ~5 FLOPs per weight byte, so passes over the weights count.
    """

    name = "mlp"
    # CUDA graphs (engine.graphs) on CUDA: an H100 (docs/engine.md, "On a GPU: one H100, the fourth
    # lease") ran 20 steps per client at K = 100 2.32x faster with graphs captured per run than eagerly,
    # each replay bitwise the eager step (the probe: 3.47x a step; a run gains from 7 steps)
    cuda_graphs = True

    def __init__(self, input_dim: int | Sequence[int], num_classes: int,
                 hidden: Sequence[int] = (200, 200)) -> None:
        d_in = input_dim if isinstance(input_dim, int) else math.prod(input_dim)
        dims = [d_in, *hidden, num_classes]
        layers = dense_stack(dims)
        super().__init__([FlattenInput(), *layers])
        self.input_dim, self.num_classes, self.hidden = d_in, num_classes, tuple(hidden)

