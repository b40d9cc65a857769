"""Training on CUDA as reproducible as on the CPU: IEEE float32 (no TF32) and deterministic kernels.

TF32. PyTorch lets cuDNN compute float32 convolutions and RNNs in TF32 on Ampere and later GPUs by
default (torch 2.13: `torch.backends.cudnn.conv.fp32_precision == "tf32"`), which keeps 10 of float32's
23 mantissa bits in the products. A run's numbers would then depend on the GPU generation, and the
batched engine (grouped convolutions; recurrences through cuBLAS, which keeps float32) and the per-client
loop (torch.nn.LSTM's cuDNN kernel) would round differently: on an H200 the float32 equivalence tests
(tests/test_models.py) missed their tolerance in 10 cases (absolute errors up to 3.6e-3, relative up
to 0.79 at small entries), and all pass in IEEE float32.

Determinism. By default cuDNN picks convolution algorithms that accumulate with atomics, and an
embedding's gradient is an index_add_ with atomics: on an H200 two identical batched rounds of the
CNNs, VGG-11, ResNet-20 and the Sent140 LSTM differed in their last bits, so a rerun of a run would not
give the same numbers. torch's deterministic mode makes them repeatable; cuBLAS then needs a fixed
workspace (CUBLAS_WORKSPACE_CONFIG, set before its first use). Ops with no deterministic CUDA kernel
(bincount, in the entropy measure, whose integer counts are exact anyway) warn instead of failing.

Algorithm choice. With the autotuner off, cuDNN's heuristics pick each convolution's algorithm among the
deterministic ones. torch asks them in cuDNN's instant mode unless TORCH_CUDNN_USE_HEURISTIC_MODE_B is
set; mode B is cuDNN's more accurate heuristic, slower to query (once per shape: torch caches the plan).
Both are functions of the problem, the GPU and the cuDNN version, never of a timing, so a rerun picks the
same algorithms. On an H100 mode B trained the batched VGG-11 1.19-1.20x and ResNet-20 1.30-1.46x as fast
(three bench runs each way; the CNNs 0.81-1.09x, within the spread of their instant runs), and every CUDA
test passed under it (docs/engine-measurements.md, "On a GPU: one H100, the fifth lease"). torch reads
the variable once, at the process's first cuDNN convolution, so `deterministic_cuda` sets it before any
work; a value the user set is kept.

`reproducible_cuda()` is called where hetfl trains or measures on CUDA (pipeline.RunJob, hetfl bench)
and by the tests on a CUDA machine. Nothing changes on the CPU, whose kernels are deterministic already.

TF32 on request (`reproducible_cuda(tf32=True)`; `hetfl train --tf32`, `hetfl bench --tf32`): for speed,
where a user accepts TF32's products. The kernels stay deterministic, so a rerun on the same GPU still
gives the same numbers; the numbers then differ from the IEEE run's (and the CPU's) by TF32's rounding,
not float32's, and may differ between GPU generations. A run says which it used (run.json
`cuda_tf32`), and its checkpoint key includes it, so an IEEE run never resumes or restores a TF32 one.
"""

from __future__ import annotations

import os

import torch

#: torch's switch for cuDNN's heuristic mode B (read once per process, at its first cuDNN convolution)
CUDNN_HEURISTIC_MODE_B = "TORCH_CUDNN_USE_HEURISTIC_MODE_B"


def float32_precision(tf32: bool = False) -> dict[str, bool]:
    """Turn TF32 off (tf32=False) or on for cuDNN (convolutions, RNNs) and cuBLAS matmuls; the flags now
    in force. Through the allow_tf32 flags, which torch 2.11 to 2.13 all honour: the newer per-operator
    `fp32_precision` settings make torch's own reads of allow_tf32 raise once set."""
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    return {"cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
            "cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32}


def deterministic_cuda() -> dict[str, object]:
    """torch's deterministic mode (warning where an op has no deterministic kernel), without filling new
    tensors with NaN (a cost on every allocation; hetfl reads no uninitialised memory), cuDNN's autotuner
    off, its heuristic mode B (the module doc), and cuBLAS's fixed workspace, the last two unless the
    caller chose otherwise; the settings now in force."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    os.environ.setdefault(CUDNN_HEURISTIC_MODE_B, "1")
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = False
    torch.backends.cudnn.benchmark = False
    return {"deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "cudnn.benchmark": torch.backends.cudnn.benchmark,
            "CUBLAS_WORKSPACE_CONFIG": os.environ["CUBLAS_WORKSPACE_CONFIG"],
            CUDNN_HEURISTIC_MODE_B: os.environ[CUDNN_HEURISTIC_MODE_B]}


def check_tf32(tf32: bool, device: torch.device, who: str = "the run trains") -> bool:
    """TF32 is a CUDA precision: asked for on another device, a ValueError naming the option, the device
    and what is allowed, before any work (hetfl train --device auto lands here on a machine without
    CUDA). `who` says what would run there."""
    if tf32 and device.type != "cuda":
        raise ValueError(f"--tf32 (TF32 products on CUDA) was asked for, but {who} on {device.type}; "
                         f"allowed: --tf32 with --device cuda, or auto on a machine with CUDA")
    return tf32


def reproducible_cuda(tf32: bool = False) -> dict[str, object]:
    """Both of the above, once per process before training or measuring on CUDA; tf32: TF32 products
    instead of IEEE float32 (see the module doc), the kernels deterministic either way."""
    return {**float32_precision(tf32), **deterministic_cuda()}
