"""The papers' larger models: hand-written batched networks (models.net.LayerNet) with torch.nn twins.

Each registered model is a LayerNet of the batched layers of models.layers, models.blocks and
models.recurrent (explicit backward passes, no autograd, fused in-place SGD), whose torch.nn twin (the
module below of the same name) has the same parameters in the same order; the twin initialises the model
and is what the per-client oracle and `hetfl bench`'s reference loop train. None has dropout. The ResNets
normalise with GroupNorm by default, as Hsieh et al. (2020, "The non-IID data quagmire of decentralized
machine learning") recommend for federated training, and with batch norm as He et al. (2016) do under
norm="batch": then the running mean and variance of every batch norm are entries of the parameter list
(`trainable` False, models.layers.BatchNorm2d), after its weight and bias, and the twin's
nn.BatchNorm2d buffers go to and from those entries (`twin_entries`).

* vgg11: the simplified VGG-11 for CIFAR of the FL papers (FedMA, FedNova): 3×3 convolutions 64, M, 128, M,
  256, 256, M, 512, 512, M, 512, 512, M; classifier 512 → 512 → 512 → classes. No normalisation (as those
  papers' VGG-11) unless norm="group"; no dropout.
* resnet20: He et al. (2016) CIFAR ResNet-20: 3 stages × 3 basic blocks, 16/32/64 channels, the
  parameter-free shortcut (option A: subsample, zero-pad channels), a normalisation after every
  convolution: GroupNorm(2 groups) (norm="group", the default) or batch norm (norm="batch", He et al.'s:
  FedFOR's Table 2, whose Appendix D uses "the proper ResNet implementation for CIFAR10 (He et al. 2016)").
* resnet_emnist: the same family for 1×28×28 images, 2 stages × 2 blocks of 32/64 channels (a ResNet-10).
* char_lstm: LEAF Shakespeare: embedding 8 over 80 characters, 2 LSTM layers of 256, the last hidden
  state → 80 classes; input int64 [B, 80].
* sent_lstm: LEAF Sent140: embedding 50 over a hashed vocabulary (20,000 words; no GloVe offline),
  2 LSTM layers of 100, the last hidden state → 2 classes; input int64 [B, 25].

The text models' twins use torch.nn.LSTM (the fused kernel research code trains with); `LSTM` below is the
same recurrence written with matmuls, for the generic torch.func path (models.func.FuncModel), which
cannot batch the fused kernel.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from hetfl.models.blocks import NORMS, GlobalAvgPool, GroupNorm, MaxPool, ReLU, Residual, norm_layer
from hetfl.models.cnn import image_shape
from hetfl.models.layers import Conv2d, Flatten, Layer, Linear, PoolReLU, ToGrouped, dense_stack
from hetfl.models.net import LayerNet
from hetfl.models.recurrent import Embedding, LSTMLayer

VGG11_CFG: tuple[int | str, ...] = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")


class VGG(nn.Module):
    def __init__(self, shape: Sequence[int], num_classes: int, cfg: Sequence[int | str] = VGG11_CFG,
                 width: float = 1.0, hidden: int = 512, norm: str | None = None, groups: int = 32) -> None:
        super().__init__()
        self.shape = tuple(shape)
        c, h, w = shape
        layers: list[nn.Module] = []
        for v in cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(2))
                h, w = h // 2, w // 2
                continue
            out = max(1, round(int(v) * width))
            layers.append(nn.Conv2d(c, out, 3, padding=1))
            if norm == "group":
                layers.append(nn.GroupNorm(math.gcd(groups, out), out))
            elif norm is not None:
                raise ValueError(f"norm is None or 'group', got {norm!r}")
            layers.append(nn.ReLU())
            c = out
        if h < 1 or w < 1:
            raise ValueError(f"image {tuple(shape)} too small for {cfg.count('M')} poolings")
        self.features = nn.Sequential(*layers)
        hid = max(1, round(hidden * width))
        self.classifier = nn.Sequential(nn.Linear(c * h * w, hid), nn.ReLU(), nn.Linear(hid, hid), nn.ReLU(),
                                        nn.Linear(hid, num_classes))

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() == 2:  # flat images (how some data sets store them)
            x = x.reshape(x.shape[0], *self.shape)
        return self.classifier(self.features(x).flatten(1))


def torch_norm(norm: str, channels: int, groups: int) -> nn.Module:
    """The twin's normalisation (models.blocks.norm_layer's): nn.GroupNorm(groups) or nn.BatchNorm2d."""
    if norm == "group":
        return nn.GroupNorm(groups, channels)
    if norm == "batch":
        return nn.BatchNorm2d(channels)
    raise ValueError(f"norm {norm!r} is unknown; allowed: {', '.join(NORMS)}")


class BasicBlock(nn.Module):
    """conv3×3 → norm → ReLU → conv3×3 → norm, + the shortcut (option A when the shape changes), → ReLU;
    norm: GroupNorm(groups) ("group") or BatchNorm2d ("batch")."""

    def __init__(self, cin: int, cout: int, stride: int, groups: int, norm: str = "group") -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.norm1 = torch_norm(norm, cout, groups)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.norm2 = torch_norm(norm, cout, groups)
        self.stride, self.pad = stride, cout - cin

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        short = x
        if self.stride != 1:
            short = short[:, :, ::self.stride, ::self.stride]
        if self.pad:
            short = F.pad(short, (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2))
        return F.relu(out + short)


class CifarResNet(nn.Module):
    """He et al.'s CIFAR ResNet (6n + 2 layers for 3 stages of n blocks), normalised by GroupNorm(groups)
    (norm="group", the default) or, as He et al., by batch norm (norm="batch")."""

    def __init__(self, shape: Sequence[int], num_classes: int, widths: Sequence[int] = (16, 32, 64),
                 blocks: int = 3, groups: int = 2, norm: str = "group") -> None:
        super().__init__()
        self.shape = tuple(shape)
        self.conv = nn.Conv2d(shape[0], widths[0], 3, padding=1, bias=False)
        self.norm = torch_norm(norm, widths[0], groups)
        layers: list[nn.Module] = []
        cin = widths[0]
        for i, cout in enumerate(widths):
            for b in range(blocks):
                layers.append(BasicBlock(cin, cout, 2 if (i > 0 and b == 0) else 1, groups, norm))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() == 2:  # flat images (how some data sets store them)
            x = x.reshape(x.shape[0], *self.shape)
        out = self.layers(F.relu(self.norm(self.conv(x))))
        return self.fc(out.mean(dim=(2, 3)))


class LSTM(nn.Module):
    """A batch_first multi-layer LSTM written with matmuls, so that vmap batches it over clients
    (torch's fused LSTM kernel has no batching rule). Parameters are named, shaped, ordered and
    initialised like torch.nn.LSTM's (gates i, f, g, o), so state dicts are interchangeable.
    forward(x [B, T, in]) → the top layer's last hidden state [B, H]."""

    def __init__(self, input_size: int, hidden: int, layers: int) -> None:
        super().__init__()
        self.hidden, self.num_layers = hidden, layers
        bound = 1 / math.sqrt(hidden)
        for layer in range(layers):
            size = input_size if layer == 0 else hidden
            for name, shape in (("weight_ih", (4 * hidden, size)), ("weight_hh", (4 * hidden, hidden)),
                                ("bias_ih", (4 * hidden,)), ("bias_hh", (4 * hidden,))):
                self.register_parameter(f"{name}_l{layer}",
                                        nn.Parameter(torch.empty(shape).uniform_(-bound, bound)))

    def forward(self, x: Tensor) -> Tensor:
        T = x.shape[1]
        h = x
        for layer in range(self.num_layers):
            w_ih, w_hh, b_ih, b_hh = (getattr(self, f"{n}_l{layer}")
                                      for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))
            pre = F.linear(h, w_ih, b_ih + b_hh)  # [B, T, 4H]: the input part of every step at once
            ht = pre.new_zeros(pre.shape[0], self.hidden)
            ct = ht
            outs = []
            for t in range(T):
                i, f, g, o = (pre[:, t] + F.linear(ht, w_hh)).chunk(4, dim=-1)
                ct = torch.sigmoid(f) * ct + torch.sigmoid(i) * torch.tanh(g)
                ht = torch.sigmoid(o) * torch.tanh(ct)
                outs.append(ht)
            if layer + 1 < self.num_layers:
                h = torch.stack(outs, dim=1)
        return ht


class TextLSTM(nn.Module):
    """Embedding → LSTM → linear on the last hidden state; input int64 token ids [B, T].

    recurrent: "torch" (torch.nn.LSTM, the fused kernel) or "matmul" (the LSTM above, which vmap can
    batch); the two have the same parameters, initialised from the same random draws."""

    def __init__(self, vocab: int, embed: int, hidden: int, layers: int, num_classes: int,
                 recurrent: str = "torch") -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, embed)
        if recurrent == "torch":
            self.lstm: nn.Module = nn.LSTM(embed, hidden, layers, batch_first=True)
        elif recurrent == "matmul":
            self.lstm = LSTM(embed, hidden, layers)
        else:
            raise ValueError(f"recurrent is 'torch' or 'matmul', got {recurrent!r}")
        self.fc = nn.Linear(hidden, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        h = self.lstm(self.embedding(x))
        return self.fc(h[0][:, -1] if isinstance(h, tuple) else h)


# -- the registered models (models.MODELS): make_model(name, input_dim, num_classes, **kwargs) -------------

def twin_entries(module: nn.Module) -> list[Tensor]:
    """The twin's tensors in the batched model's parameter order: module.parameters(), with each batch
    norm's running mean and variance after its weight and bias (models.layers.BatchNorm2d's entries). Its
    num_batches_tracked is left out: with momentum 0.1 it changes no value."""
    out: list[Tensor] = []
    for m in module.modules():  # parameters(recurse=False) in this order are module.parameters()
        out += m.parameters(recurse=False)
        if isinstance(m, nn.BatchNorm2d):
            out += [m.running_mean, m.running_var]
    return out


class TwinNet(LayerNet):
    """A LayerNet whose torch.nn twin, `factory()`, has the same parameters (and batch-norm running
    statistics, `twin_entries`) in the same order (a layer's `transposed` flags the entries it stores
    transposed, i.e. Linear weights [in, out]).

    init_params is the twin's own initialisation, seeded by a draw from the generator (deterministic; the
    global RNG is left as it was), so a model starts where its torch.nn twin would.

    The CPU executor (engine.executor): one client per block, clients on separate cores. Measured in
    docs/engine.md: their convolutions and LSTMs are oneDNN kernels that a grouped convolution over
    clients or a batched recurrence does not beat on the CPU, and that scale poorly over cores at FL
    minibatch sizes, so whole clients go to cores instead.
    """

    cpu_block = 1
    client_parallel = True

    def __init__(self, name: str, layers: list[Layer], factory: Callable[[], nn.Module]) -> None:
        super().__init__(layers)
        self.name, self.factory = name, factory
        self._transposed = tuple(t for layer in layers for t in layer.transposed)
        shapes = [s[::-1] if t else s for layer in layers for s, t in zip(layer.shapes, layer.transposed,
                                                                          strict=True)]
        twin = [tuple(p.shape) for p in twin_entries(factory())]
        if [tuple(s) for s in shapes] != twin:
            raise AssertionError(f"{name}: batched parameters {shapes} differ from the twin's {twin}")

    def init_params(self, generator: torch.Generator) -> list[Tensor]:
        seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            module = self.factory()
        return self.from_module(module)

    def make_module(self) -> nn.Module:
        return self.factory()

    def to_module(self, params: list[Tensor], module: nn.Module) -> None:
        with torch.no_grad():
            for dst, src, t in zip(twin_entries(module), params, self._transposed, strict=True):
                dst.copy_(src.T if t else src)

    def from_module(self, module: nn.Module) -> list[Tensor]:
        return [(p.detach().T if t else p.detach()).contiguous().clone()
                for p, t in zip(twin_entries(module), self._transposed, strict=True)]

    def num_params(self) -> int:
        return sum(math.prod(s) for layer in self.layers for s in layer.shapes)


class VGG11(TwinNet):
    """kwargs: width (channel multiplier), hidden (classifier width, 512), norm (None or "group"), groups,
    channels_last (the grouped activations' memory order, models.cnn.ConvNet; "auto"), conv ("auto",
    "grouped" or "unfold", models.layers.Conv2d)."""

    def __init__(self, input_dim: int | Sequence[int], num_classes: int, cfg: Sequence[int | str] = VGG11_CFG,
                 width: float = 1.0, hidden: int = 512, norm: str | None = None, groups: int = 32,
                 channels_last: bool | str = "auto", conv: str = "auto") -> None:
        shape = image_shape(input_dim, (3, 32, 32))
        factory = partial(VGG, shape, num_classes, cfg, width, hidden, norm, groups)
        c, h, w = shape
        layers: list[Layer] = [ToGrouped(shape, channels_last)]
        for i, v in enumerate(cfg):
            if v == "M":
                continue
            out = max(1, round(int(v) * width))
            layers.append(Conv2d(c, out, 3, 1, (h, w), impl=conv, channels_last=channels_last))
            pool = i + 1 < len(cfg) and cfg[i + 1] == "M"
            if norm == "group":
                layers.append(GroupNorm(out, math.gcd(groups, out), relu=True))
                if pool:
                    layers.append(MaxPool())
            else:  # ReLU then pool as pool then ReLU (models.layers.PoolReLU)
                layers.append(PoolReLU() if pool else ReLU())
            c = out
            if pool:
                h, w = h // 2, w // 2
        hid = max(1, round(hidden * width))
        layers += [Flatten((c, h, w)), *dense_stack([c * h * w, hid, hid, num_classes])]
        super().__init__("vgg11", layers, factory)


class ResNet20(TwinNet):
    """kwargs: widths (16, 32, 64), blocks (3 per stage), groups (2), norm ("group", the default, or
    "batch": He et al.'s batch norm after every convolution, per client, whose running statistics are
    buffers of the parameter list; groups then has no use), channels_last (the grouped activations'
    memory order, models.cnn.ConvNet; "auto"), conv ("auto", "grouped" or "unfold", models.layers.Conv2d).
    """

    name = "resnet20"
    default_shape = (3, 32, 32)
    defaults: dict = {}

    def __init__(self, input_dim: int | Sequence[int], num_classes: int, **kwargs) -> None:
        kwargs = {**self.defaults, **kwargs}
        channels_last = kwargs.pop("channels_last", "auto")
        conv = kwargs.pop("conv", "auto")
        shape = image_shape(input_dim, self.default_shape)
        factory = partial(CifarResNet, shape, num_classes, **kwargs)
        widths, blocks, groups = kwargs.get("widths", (16, 32, 64)), kwargs.get("blocks", 3), \
            kwargs.get("groups", 2)
        norm = kwargs.get("norm", "group")
        hw = shape[1:]
        stem = Conv2d(shape[0], widths[0], 3, 1, hw, bias=False, impl=conv, channels_last=channels_last)
        layers: list[Layer] = [ToGrouped(shape, channels_last), stem,
                               norm_layer(norm, widths[0], groups, relu=True)]
        cin = widths[0]
        for i, cout in enumerate(widths):
            for b in range(blocks):
                block = Residual(cin, cout, 2 if (i > 0 and b == 0) else 1, groups, hw, conv, norm,
                                 channels_last)
                layers.append(block)
                cin, hw = cout, block.hw_out
        layers += [GlobalAvgPool(cin), Linear(cin, num_classes, relu=False)]
        super().__init__(self.name, layers, factory)


class ResNetEMNIST(ResNet20):
    """kwargs: widths (32, 64), blocks (2 per stage), groups (2), norm ("group" or "batch"), as ResNet20."""

    name = "resnet_emnist"
    default_shape = (1, 28, 28)
    defaults = {"widths": (32, 64), "blocks": 2}


class CharLSTM(TwinNet):
    """input_dim: the sequence length (80). kwargs: vocab (80), embed (8), hidden (256), layers (2), cell
    ("fused", the default, or "ops": how a block of clients computes each time step on CUDA,
    models.recurrent; the CPU computes both as the ops)."""

    name = "char_lstm"
    default_vocab, default_embed, default_hidden = 80, 8, 256
    # On CUDA, rounds of fewer clients train client by client on cuDNN's fused LSTM (engine.executor).
    # On an H200 (docs/engine-measurements.md, "On a GPU: the second H200 lease") a block's step took
    # 25-60 ms at 2 to 64 clients (kernel launches, not arithmetic). With the fused cells, a round of 3
    # clients trained 1.16x (char)
    # and 1.46x (sent) faster batched than client by client on cuDNN, and a round of 2 0.71x and 0.75x.
    cuda_batched_from = 3
    # CUDA graphs (engine.graphs) on CUDA: an H100 (docs/engine.md, "The first lease with graphs") ran
    # 20 steps per client at K = 64 1.10x (char) and 2.58x (sent) faster with graphs captured per run
    # than eagerly, each replay bitwise the eager step; VGG-11 and ResNet-20 gained 1.00x and 1.01x.
    cuda_graphs = True

    def __init__(self, input_dim: int | Sequence[int], num_classes: int, vocab: int | None = None,
                 embed: int | None = None, hidden: int | None = None, layers: int = 2,
                 cell: str = "fused") -> None:
        vocab, embed = vocab or self.default_vocab, embed or self.default_embed
        hidden = hidden or self.default_hidden
        seq = int(input_dim if isinstance(input_dim, int) else math.prod(input_dim))
        stack: list[Layer] = [Embedding(vocab, embed, steps=seq)]
        for layer in range(layers):
            stack.append(LSTMLayer(embed if layer == 0 else hidden, hidden, last=layer == layers - 1,
                                   steps=seq, cell=cell))
        stack.append(Linear(hidden, num_classes, relu=False))
        super().__init__(self.name, stack, partial(TextLSTM, vocab, embed, hidden, layers, num_classes))


class SentLSTM(CharLSTM):
    """input_dim: the sequence length (25). kwargs: vocab (20,000 hashed words), embed (50), hidden (100),
    layers (2), cell ("fused" or "ops")."""

    name = "sent_lstm"
    default_vocab, default_embed, default_hidden = 20_000, 50, 100
