"""A sequential network of batched layers that implements the BatchedModel contract (see base.py)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from hetfl.engine.executor import cuda_block
from hetfl.models.layers import Layer


def _cache_bytes() -> int:
    """A working-set budget for one block of clients: ⅜ of the last-level cache (Linux sysfs), else 12 MiB.

    ⅜ was the best of ¼ … ¾ for the 2NN on a 32 MiB L3 (docs/engine.md): the rest holds the minibatch,
    the transient gradients and whatever else runs."""
    try:
        with open("/sys/devices/system/cpu/cpu0/cache/index3/size") as f:
            size = f.read().strip().upper()
        scale = {"K": 2 ** 10, "M": 2 ** 20}.get(size[-1], 1)
        return int(size.rstrip("KM")) * scale * 3 // 8
    except (OSError, ValueError):
        return 12 * 2 ** 20


def _nbytes(saved: object) -> int:
    if isinstance(saved, Tensor):
        return saved.numel() * saved.element_size()
    if isinstance(saved, tuple | list):
        return sum(_nbytes(s) for s in saved)
    return 0


#: fewer classes than this run torch's CPU softmax row kernel off its vector path: on an AVX-512 host
#: (16 floats a vector) a [50, 20, 10] stack took 64.6 µs on 2 threads, padded to 16 columns 17.9 µs
#: (docs/engine.md); at 16 and more padding gains nothing
SOFTMAX_PAD = 16


def softmax_classes(logits: Tensor) -> Tensor:
    """softmax over the last dim (the classes) of logits [..., C]. Below SOFTMAX_PAD classes (on the CPU)
    the rows are padded with −inf to SOFTMAX_PAD columns first (exp(−inf) = 0: the same probabilities up
    to the rounding of their sum) and the first C columns returned, a view. The kernel works row by row
    either way, so a client's rows get the same bits wherever the client sits in a stack."""
    c = logits.shape[-1]
    if c >= SOFTMAX_PAD or logits.device.type != "cpu":
        return torch.softmax(logits, dim=-1)
    padded = torch.nn.functional.pad(logits, (0, SOFTMAX_PAD - c), value=float("-inf"))
    return torch.softmax(padded, dim=-1)[..., :c]


def xent_delta(logits: Tensor, y: Tensor) -> Tensor:
    """∂/∂logits of each client's mean cross-entropy: (softmax − onehot(y)) / B, for logits [K, B, C]."""
    g = softmax_classes(logits)
    g.scatter_add_(-1, y.unsqueeze(-1), torch.full(y.shape + (1,), -1.0, dtype=g.dtype, device=g.device))
    return g.div_(logits.shape[1])


class LayerNet:
    """Parameters are the layers' parameters concatenated in order; `trainable` flags the buffers."""

    name = "net"
    # Samples per chunk when evaluating the global model: bounds the activations of conv models.
    eval_chunk = 4096
    # On the CPU a step runs on blocks of clients whose parameters + activations fit this budget: the
    # layers of a block then pass their data through the cache, not DRAM (see client_block).
    cache_bytes = _cache_bytes()
    # The CPU executor (engine.executor): a fixed block size (None: what fits cache_bytes), and whether
    # blocks train on separate cores at once, one intra-op thread each.
    cpu_block: int | None = None
    client_parallel = False

    def __init__(self, layers: list[Layer]) -> None:
        self.layers = layers
        self._counts = [len(layer.shapes) for layer in layers]
        self.trainable: tuple[bool, ...] = tuple(t for layer in layers for t in layer.trainable)
        # The first layer with parameters needs no input gradient (nothing below it learns).
        self._first = next((i for i, c in enumerate(self._counts) if c), len(layers))
        self._module_counts = [len(layer.make_modules()) for layer in layers]
        self._per_client: dict[tuple, int] = {}  # working set of one client per input shape, bytes

    # -- parameters ---------------------------------------------------------------------------------
    def init_params(self, generator: torch.Generator) -> list[Tensor]:
        return [t for layer in self.layers for t in layer.init_params(generator)]

    def _split(self, params: list[Tensor]) -> list[list[Tensor]]:
        out, i = [], 0
        for c in self._counts:
            out.append(params[i:i + c])
            i += c
        return out

    def train_flops(self, batch: int) -> int:
        """FLOPs of one client step (forward + backward matmuls/convolutions, ×2 per multiply-add)."""
        return sum(layer.train_flops(batch, i > self._first) for i, layer in enumerate(self.layers))

    def step_bytes(self, batch: int) -> int:
        """Bytes one client step must at least move: every parameter it can change, read and written."""
        return sum(layer.step_bytes(batch) for layer in self.layers)

    # -- batched training ---------------------------------------------------------------------------
    def client_block(self, params: list[Tensor], x: Tensor) -> int:
        """Clients per block (engine.executor). On CUDA as many as half the free memory holds; on the CPU
        `cpu_block` when the model fixes it (1: per-client kernels), else as many as fit `cache_bytes`.

        A step over K clients is a sequence of batched kernels, each streaming all K clients' weights
        and activations; with K = 100 those are hundreds of MB, so every kernel reads DRAM. Run on blocks
        of clients instead (the same kernels, fewer clients each), the activations a layer writes are
        still in cache when the next reads them and a weight read by the forward pass is in cache for the
        backward pass and the update. The working set per client is measured once per input shape
        (client_bytes). x: a minibatch [m, B, ...] (only its shape past the client axis, dtype and device
        matter). The result is not capped at m.
        """
        if x.device.type == "cpu" and self.cpu_block is not None:
            return self.cpu_block
        key = (tuple(x.shape[1:]), x.dtype)
        if key not in self._per_client:
            self._per_client[key] = self.client_bytes(params, x)
        per_client = self._per_client[key]
        if x.device.type == "cuda":
            # the block's parameters, gradients (the grads path) and activations
            return cuda_block(per_client + _nbytes(params) // max(len(params[0]), 1), x.device)
        if x.device.type != "cpu":
            return 1 << 30
        # At least 2: one client per block leaves grouped kernels too little to split over threads
        # (the McMahan CNN ran 1.6× slower with 1 than with 2).
        return max(2, self.cache_bytes // max(per_client, 1))

    @torch.no_grad()
    def client_bytes(self, params: list[Tensor], x: Tensor) -> int:
        """Bytes of one client's parameters and of the activations its forward pass saves for the backward
        pass, on a minibatch shaped like x[0]: a forward pass of one client on zeros, on the CPU for a CPU
        run and on the meta device (shapes only, no work) for any other.

        Not on the meta device on the CPU: its baddbmm imports torch's symbolic shapes and with them
        sympy, 0.6 s of every CPU training process (seconds more where their bytecode is not compiled:
        `make setup` compiles what hetfl imports). One client's forward pass takes 2 ms for the 2NN and
        about 45 ms for the CNNs, once per process; the larger models fix `cpu_block` and never get here
        on the CPU. The two devices give the same bytes wherever the layers take the same path on both
        (tests/test_models.py); the LSTM's oneDNN path saves less on the CPU than its generic path.
        """
        device = "cpu" if x.device.type == "cpu" else "meta"
        one = [torch.zeros((1, *p.shape[1:]), dtype=p.dtype, device=device) for p in params]
        x1 = torch.zeros((1, *x.shape[1:]), dtype=x.dtype, device=device)
        return _nbytes(one) + _nbytes(self._forward(self._split(one), x1, True)[1])

    def _forward(self, per_layer: list[list[Tensor]], x: Tensor, training: bool) -> tuple[Tensor, list]:
        saved = []
        for layer, p in zip(self.layers, per_layer, strict=True):
            x, s = layer.forward(p, x, training)
            saved.append(s)
        return x, saved

    def grads(self, params: list[Tensor], x: Tensor, y: Tensor) -> list[Tensor]:
        """Stacked gradients of each client's mean cross-entropy; zeros for buffers, which (BN running
        statistics) are updated in place as the forward pass of local training does."""
        n = self.client_block(params, x)
        if n >= x.shape[0]:
            return self._grads(params, x, y)
        blocks = [self._grads([p[a:a + n] for p in params], x[a:a + n], y[a:a + n])
                  for a in range(0, x.shape[0], n)]
        return [torch.cat(gs) for gs in zip(*blocks, strict=True)]

    def _grads(self, params: list[Tensor], x: Tensor, y: Tensor) -> list[Tensor]:
        per_layer = self._split(params)
        logits, saved = self._forward(per_layer, x, True)
        dy: Tensor | None = xent_delta(logits, y)
        grads: list[list[Tensor]] = [[] for _ in self.layers]
        for i in range(len(self.layers) - 1, -1, -1):
            dy, grads[i] = self.layers[i].backward(per_layer[i], saved[i], dy, i > self._first)
            if i <= self._first:
                break
        return [g for gs in grads for g in gs]

    def squared_grad_sums(self, params: list[Tensor], x: Tensor, y: Tensor, mask: Tensor
                          ) -> list[Tensor] | None:
        """Σ_b g_b ⊙ g_b over each client's samples b with mask 1 (g_b: the gradient of sample b's own
        loss), stacked [K, ...]; the diagonal empirical Fisher's numerator (engine.fisher). None when a
        layer with parameters is not Linear: a convolution's per-sample gradient sums over positions
        before it is squared, so it has no such closed form (the caller falls back to per-sample grads)."""
        if not all(hasattr(layer, "squared_grad_sums") for layer, c in zip(self.layers, self._counts,
                                                                          strict=True) if c):
            return None
        per_layer = self._split(params)
        logits, saved = self._forward(per_layer, x, True)
        dy: Tensor | None = xent_delta(logits, y).mul_((x.shape[1] * mask).unsqueeze(-1))  # per sample
        sums: list[list[Tensor]] = [[] for _ in self.layers]
        for i in range(len(self.layers) - 1, self._first - 1, -1):
            if self._counts[i]:
                dy, sums[i] = self.layers[i].squared_grad_sums(per_layer[i], saved[i], dy, i > self._first)
            else:
                dy, _ = self.layers[i].backward(per_layer[i], saved[i], dy, i > self._first)
        return [g for gs in sums for g in gs]

    def sgd_step(self, params: list[Tensor], x: Tensor, y: Tensor, lr: float) -> None:
        """One SGD step of every client, in place: the backward pass updates each layer as it leaves it."""
        n = self.client_block(params, x)
        for a in range(0, x.shape[0], n):  # slices of contiguous stacks are contiguous views
            self._sgd_step([p[a:a + n] for p in params], x[a:a + n], y[a:a + n], lr)

    def _sgd_step(self, params: list[Tensor], x: Tensor, y: Tensor, lr: float) -> None:
        per_layer = self._split(params)
        logits, saved = self._forward(per_layer, x, True)
        dy: Tensor | None = xent_delta(logits, y)
        for i in range(len(self.layers) - 1, self._first - 1, -1):
            dy = self.layers[i].sgd_backward(per_layer[i], saved[i], dy, i > self._first, lr)
            saved[i] = None  # free activations as soon as they are used

    @torch.no_grad()
    def logits(self, params: list[Tensor], x: Tensor) -> Tensor:
        """The global model (evaluation mode: BN uses running statistics) on x [n, ...]."""
        per_layer = self._split([p.unsqueeze(0) for p in params])
        out = [self._forward(per_layer, x[lo:lo + self.eval_chunk].unsqueeze(0), False)[0][0]
               for lo in range(0, len(x), self.eval_chunk)]
        return torch.cat(out) if out else x.new_empty(0, params[-1].shape[-1])  # the last bias is [C]

    # -- the torch.nn twin (the oracle trains it) ---------------------------------------------------
    def make_module(self) -> nn.Module:
        return nn.Sequential(*[m for layer in self.layers for m in layer.make_modules()])

    def _module_groups(self, module: nn.Module) -> list[list[nn.Module]]:
        children, out, i = list(module.children()), [], 0
        for n in self._module_counts:
            out.append(children[i:i + n])
            i += n
        return out

    def to_module(self, params: list[Tensor], module: nn.Module) -> None:
        for layer, p, mods in zip(self.layers, self._split(params), self._module_groups(module), strict=True):
            layer.to_modules(p, mods)

    def from_module(self, module: nn.Module) -> list[Tensor]:
        return [t for layer, mods in zip(self.layers, self._module_groups(module), strict=True)
                for t in layer.from_modules(mods)]
