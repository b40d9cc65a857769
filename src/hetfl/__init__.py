"""hetfl: reproducibility benchmark suite for federated learning with heterogeneous clients."""

__version__ = "0.1.0"
