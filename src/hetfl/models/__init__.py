"""Models written so that many clients train as one batched computation (parameters stacked on axis 0)."""

import math
from collections.abc import Sequence
from typing import Any

from hetfl.models.base import BatchedModel
from hetfl.models.cnn import CNNBN, CifarCNN, McMahanCNN
from hetfl.models.logreg import LogReg
from hetfl.models.mlp import MLP
from hetfl.models.zoo import VGG11, CharLSTM, ResNet20, ResNetEMNIST, SentLSTM

MODELS: dict[str, type] = {"logreg": LogReg, "mlp": MLP, "cnn": McMahanCNN, "cnn_cifar": CifarCNN,
                           "cnn_bn": CNNBN, "vgg11": VGG11, "resnet20": ResNet20,
                           "resnet_emnist": ResNetEMNIST, "char_lstm": CharLSTM, "sent_lstm": SentLSTM}


def make_model(name: str, input_dim: int | Sequence[int], num_classes: int, **kwargs: Any) -> BatchedModel:
    """input_dim: a feature count, or for image models a shape (C, H, W) (a flat count is reshaped);
    kwargs select variants, e.g. make_model("mlp", 784, 10, hidden=(200, 100))."""
    if name not in MODELS:
        raise ValueError(f"model '{name}' is unknown; allowed: {', '.join(sorted(MODELS))}")
    if name == "logreg" and not isinstance(input_dim, int):
        input_dim = math.prod(int(s) for s in input_dim)
    return MODELS[name](input_dim, num_classes, **kwargs)


__all__ = ["BatchedModel", "CNNBN", "CifarCNN", "LogReg", "MLP", "McMahanCNN", "MODELS", "make_model"]
