"""Models written so that many clients train as one batched computation (parameters stacked on axis 0)."""

from hetfl.models.base import BatchedModel
from hetfl.models.logreg import LogReg

MODELS: dict[str, type] = {"logreg": LogReg}


def make_model(name: str, input_dim: int, num_classes: int) -> BatchedModel:
    if name not in MODELS:
        raise ValueError(f"model '{name}' is unknown; allowed: {', '.join(sorted(MODELS))}")
    return MODELS[name](input_dim, num_classes)


__all__ = ["BatchedModel", "LogReg", "MODELS", "make_model"]
