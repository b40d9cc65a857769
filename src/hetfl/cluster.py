"""What a training job asks a cluster scheduler for, estimated from the scale of the runs it trains.

A training job trains a list of runs: one cell (the runs that share a split), or all the cells of a
setting or of an experiment when they are short (``cells_per_job``). ``estimate`` adds up their work from
RunSpec fields alone — model, dataset, devices, sizes, epochs, rounds, evaluation cadence — without
importing torch or reading data, so that Snakemake can call it for every job while it builds the DAG.
``train_resources`` and ``train_group`` turn the estimate into the SLURM executor's resources (``mem_mb``,
``runtime`` in minutes, ``gpu``, partition and account) and a job group for the short runs. A job given a
GPU asks for the time of ``gpu_estimate``, a rough GPU model (the engine's measured share of a card's
float32 matmul rate, plus a launch-bound floor per local step), not a CPU core's.
docs/cluster.md gives every constant's source; the estimates are requests, meant to err on the large side,
not predictions.

Splits (``hetfl split``) load their whole source: ``split_on_cluster`` sends those estimated above
HETFL_SLURM_LOCAL_SPLIT_MB of memory (EMNIST, CIFAR, FEMNIST, Shakespeare, Sent140, the FedBN sets) to the
cluster as jobs of their own rule, ``split_large`` (workflow/rules/splits.smk), with ``split_resources``;
the small ones stay on the submitting host.

Where a job runs (partition, account, GPUs) is the user's, never the code's: it comes from the
environment through ``ClusterOptions.from_environ`` (or from the profile's resources, which these
leave alone when the environment says nothing).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from hetfl.config import SIZE_PARAMS, TEXT_MODELS, RunSpec
from hetfl.data.sizes import SizeSpec, least_count
from hetfl.data.sources import SOURCES


@dataclass(frozen=True)
class ModelCost:
    """A model at its reference input: trainable parameters, forward FLOPs per sample (multiply-add =
    2), floats kept per sample for the backward pass, whether a GPU is worth asking for, the FLOP/s
    one CPU core sustains on it in the batched engine, and on a GPU the share of the card's float32
    matmul rate the batched engine sustains in training and in evaluating the global model (``gpu_estimate``;
    0 for a model never given a GPU)."""

    params: int
    flops: float
    activations: int
    gpu: bool
    rate: float
    gpu_share: float = 0.0
    gpu_eval_share: float = 0.0


# On a GPU: the batched engine's share of the card's float32 matmul rate ("% matmul"), `hetfl bench --device
# cuda` on one H100 at 64 clients a round, IEEE float32 and deterministic mode as `hetfl train` runs
# (docs/engine-measurements.md, "On a GPU: one H100, the third lease"): CNN 20.7 %, CNN + BN 19.0,
# VGG-11 48.6, ResNet-20 11.0, char-LSTM 19.1, sent-LSTM 2.9. Unmeasured there: the CIFAR CNN taken at the
# CNN's share, the EMNIST ResNet at ResNet-20's.
GPU_SHARES = {"cnn": 0.207, "cnn_bn": 0.190, "cnn_cifar": 0.207, "vgg11": 0.486, "resnet20": 0.110,
              "resnet_emnist": 0.110, "char_lstm": 0.191, "sent_lstm": 0.029}
# Evaluating the global model, the same way: `hetfl bench --device cuda --eval 4096` on one H100 (the fourth
# lease, matmul 42.7 TFLOP/s; docs/engine-measurements.md, "On a GPU: one H100, the fourth lease"): CNN
# 58.7 %, CNN + BN 52.1, VGG-11 28.8, ResNet-20 30.9, char-LSTM 69.7, sent-LSTM 12.9. VGG-11 evaluates at
# 0.6x its training share, the others faster than they train. Unmeasured: as in GPU_SHARES.
GPU_EVAL_SHARES = {"cnn": 0.587, "cnn_bn": 0.521, "cnn_cifar": 0.587, "vgg11": 0.288, "resnet20": 0.309,
                   "resnet_emnist": 0.309, "char_lstm": 0.697, "sent_lstm": 0.129}
#: HETFL_SLURM_GPU_GFLOPS's default: that H100's float32 matmul rate (43.4-43.8 TFLOP/s measured)
GPU_GFLOPS = 43_400
#: a block's local step on a GPU is launch-bound in small rounds: 25-60 ms at up to 64 clients
#: (docs/engine.md, the second H200 lease); counted for every local step of a round on top of its FLOPs,
#: at the upper end
GPU_STEP_SECONDS = 0.06
# One CPU core in the batched engine (`hetfl bench --threads 1` on the project's 2-core AMD EPYC, 35 GFLOP/s
# matmul): the McMahan CNN trains at 18.7 GFLOP/s, the 2NN at 5.6; rounded down. Unmeasured models (VGG,
# ResNet, LSTM) are taken at the CNN's rate.
CONV_FLOPS = 15e9
DENSE_FLOPS = 5e9
# The convolutional and recurrent models at their reference input (cnn, cnn_bn, resnet_emnist: 1×28×28;
# cnn_cifar, vgg11, resnet20: 3×32×32; char_lstm: 80 characters; sent_lstm: 25 words), counted with
# torch.utils.flop_counter on hetfl.models (tests/test_cluster.py recounts them). The dense models
# (logreg, mlp) are sized from the dataset's features instead, by ``dense_cost``. The ResNets' norm: batch
# (FedFOR Table 2) trains the same parameters and convolutions: its running statistics (2 per channel,
# 0.5 % of ResNet-20's entries) are not counted, as cnn_bn's are not.
MODEL_COSTS: dict[str, ModelCost] = {
    "cnn": ModelCost(1_663_370, 24.5e6, 90_000, True, CONV_FLOPS),
    "cnn_bn": ModelCost(1_663_562, 24.5e6, 127_000, True, CONV_FLOPS),
    "cnn_cifar": ModelCost(797_962, 29.4e6, 133_000, True, CONV_FLOPS),
    "vgg11": ModelCost(9_750_922, 306.6e6, 336_000, True, CONV_FLOPS),
    "resnet20": ModelCost(269_722, 81.1e6, 377_000, True, CONV_FLOPS),
    "resnet_emnist": ModelCost(171_038, 108.8e6, 351_000, True, CONV_FLOPS),
    # LSTM activations: sequence length × layers × hidden × 6 (four gates, cell and hidden state)
    "char_lstm": ModelCost(819_920, 127.2e6, 80 * 2 * 256 * 6, True, CONV_FLOPS),
    "sent_lstm": ModelCost(1_141_802, 7.0e6, 25 * 2 * 100 * 6, True, CONV_FLOPS),
    "quadratic": ModelCost(1, 4.0, 1, False, DENSE_FLOPS),
}
MODEL_COSTS.update({name: replace(MODEL_COSTS[name], gpu_share=share, gpu_eval_share=GPU_EVAL_SHARES[name])
                    for name, share in GPU_SHARES.items()})

SYNTHETIC_SHAPE = (60, 10)  # FedProx SYNTHETIC(α, β): 60 features, 10 classes (data/synthetic.py)

# Per-source sample counts (train split, test split) of the copies docs/datasets.md names; a source
# without a test split has 0. Used for shards (which deal out the whole train split) and the global test.
SOURCE_SIZES: dict[str, tuple[int, int]] = {
    "digits": (1_438, 359), "mnist5k": (4_000, 1_000), "mnist": (60_000, 10_000),
    "emnist-balanced": (112_800, 18_800), "emnist-byclass": (697_932, 116_323),
    "emnist-letters": (124_800, 20_800), "cifar10": (50_000, 10_000), "cifar100": (50_000, 10_000),
    "femnist": (814_255, 0), "shakespeare": (4_226_158, 0), "sent140": (1_600_000, 359),
}
# Natural splits: mean samples per writer/speaker in LEAF (Caldas et al. 2018, Table 1).
NATURAL_SAMPLES_PER_DEVICE: dict[str, float] = {"femnist": 226.83, "shakespeare": 3_743.2, "sent140": 2.42}

MIN_SAMPLE_SECONDS = 2.5e-6  # floor per sample step (hetfl bench: logreg on SYNTHETIC, 2.55 µs)
START_SECONDS = 30.0  # one `hetfl train` process: interpreter, imports, reading the split
ROUND_SECONDS = 0.01  # per round: schedule, aggregation, bookkeeping
BASE_MB = 1_000  # interpreter with torch, numpy, pandas loaded (peak RSS 320-450 MB in hetfl bench) + margin
# client-stacked parameter tensors alive at once: weights, update, up to two of algorithm state (measured:
# FedAvg, McMahan CNN, 40 devices × 100 mnist5k samples, peak RSS 1.95 GB; this estimate 2.5 GB)
STATE_COPIES = 4
SAFETY = 2.0  # requests = 2 × the estimate (shared nodes, slower cores, evaluation not modelled exactly)
SHORT_SECONDS = 300.0  # a job under five minutes spends about as long queueing and starting: group it
# cells estimated under this in all train in one process (cells_per_job): a process start is a few
# seconds (`import torch` ≈ 2 s, hetfl, the code fingerprint) against a SYNTHETIC cell's 5-25 s of
# training, while a job this short loses little of a cluster's parallelism (the estimates run ~6x over
# SYNTHETIC's measured times)
BUNDLE_SECONDS = 900.0
#: HETFL_SLURM_GPU_GRES: a GRES name and optional type (one letter at least, so "gpu:2" is not read as a
#: type), without the count that train_resources appends
GRES_NAME = re.compile(r"[A-Za-z0-9_]+(:(?=[A-Za-z0-9_.]*[A-Za-z_])[A-Za-z0-9_.]+)?")
GROUP_SHORT = "hetfl_short"  # the group id the slurm profile's group-components refers to

# `hetfl split` loads its whole source (train and test splits) before dealing it out. Its peak memory is
# about SPLIT_BASE_MB + SPLIT_COPIES[task] × the source's arrays (float32 pixels, int64 character or word
# ids). Measured with /usr/bin/time on local copies (2026-11-26, 2-core AMD EPYC; hetfl.projection's random
# images, random text of LEAF's form): mnist5k 119 MB; mnist 851 MB and cifar10 2,397 MB, 3.5 and 3.2 times
# their arrays above the base; a tenth of Shakespeare 1,469 MB (5.2 times) and of Sent140 409 MB (9.5 times:
# the tweets are held as strings too); rounded up. Each took 2-8 s from the local copy; a download from the
# Hugging Face Hub comes on top.
SPLIT_BASE_MB = 120
SPLIT_COPIES = {"image": 4, "next-char": 6, "sentiment": 12}
#: a registered source without SOURCE_SIZES (DomainNet and Digits: their size is the prepared copy's) is
#: taken at this peak: an assumption, not a measurement (a retry asks for twice as much)
UNSIZED_SPLIT_MB = 8_192
#: HETFL_SLURM_LOCAL_SPLIT_MB's default: a split estimated above it is a cluster job (split_large). The
#: largest split under it is MNIST's (957 MB by the estimate, 851 MB measured, 3 s)
LOCAL_SPLIT_MB = 1_024
#: a split job's time limit (× the attempt): a download's time depends on the network and is not estimated;
#: from a local copy the largest split measured took seconds
SPLIT_MINUTES = 60


@dataclass(frozen=True)
class Estimate:
    """A job's estimated cost: seconds (on one CPU core, or on a GPU for ``gpu_estimate``), peak memory in
    MB, and whether it wants a GPU."""

    seconds: float
    mem_mb: float
    gpu: bool


def expected_size(sizes: Mapping[str, object]) -> float:
    """Expected samples per device of a size spec (data/sizes.py), kept within [min_size, max_size].

    equal: ``size``; lognormal: ``size`` (its mean by construction); pareto: E[min(x_m·X, M)] for
    X ~ Pareto(b, 1), x_m = size, M = max_size, i.e. x_m + x_m^b (M^(1−b) − x_m^(1−b)) / (1 − b)
    (x_m + x_m·ln(M / x_m) when b = 1).
    """
    size = float(sizes.get("size", 20))
    cap = float(sizes.get("max_size", 1000))
    floor = float(sizes.get("min_size", 10))
    if sizes.get("distribution") == "pareto" and cap > size:
        b = float(sizes.get("index", 0.5))
        if b == 1:
            size += size * math.log(cap / size)
        else:
            size += size**b * (cap ** (1 - b) - size ** (1 - b)) / (1 - b)
    return max(min(size, cap), floor)


def total_samples(spec: RunSpec) -> float:
    """Samples (train + local test) the federation holds, over all devices."""
    if spec.dataset == "quadratic":
        return float(spec.num_devices)
    skew = (spec.partition or {}).get("label_skew")
    source_train = SOURCE_SIZES.get(spec.dataset, (math.inf, 0))[0]
    # on a real dataset, sizes "equal" is the partitioner's split of every sample
    # (data.build.build_from_source), not `size` samples a device; so are shards.
    # partition.equal_counts then trims some away: the whole split is an upper bound
    dealt_whole = skew == "shards" or (spec.dataset != "synthetic" and skew != "natural"
                                       and (spec.sizes or {}).get("distribution", "equal") == "equal")
    if dealt_whole and math.isfinite(source_train):
        return float(source_train)
    per_device = NATURAL_SAMPLES_PER_DEVICE.get(spec.dataset, 1.0) if skew == "natural" \
        else expected_size(spec.sizes)
    return min(spec.num_devices * per_device, source_train)


def dense_cost(dims: Sequence[int]) -> ModelCost:
    """A stack of dense layers dims[0] → … → dims[-1]: Σ (d_i + 1)·d_{i+1} parameters, 2·Σ d_i·d_{i+1}
    forward FLOPs, the layer outputs as activations."""
    pairs = list(zip(dims[:-1], dims[1:], strict=True))
    return ModelCost(sum((a + 1) * b for a, b in pairs), 2.0 * sum(a * b for a, b in pairs), sum(dims[1:]),
                     False, DENSE_FLOPS)


def model_cost(spec: RunSpec) -> ModelCost:
    """The run's model: from MODEL_COSTS, or a dense stack over the data's features and classes."""
    if spec.model in MODEL_COSTS:
        return MODEL_COSTS[spec.model]
    if spec.dataset == "synthetic":
        features, classes = SYNTHETIC_SHAPE
    else:
        info = SOURCES[spec.dataset]
        features, classes = math.prod(info.input_shape), info.num_classes
    hidden = list(spec.model_params.get("hidden", (200, 200))) if spec.model == "mlp" else []
    return dense_cost([features, *hidden, classes])


def input_bytes(spec: RunSpec) -> int:
    """Bytes of one sample as the engine holds it: float32 pixels/features or int64 token ids."""
    if spec.dataset == "synthetic":
        return 4 * SYNTHETIC_SHAPE[0]
    if spec.dataset == "quadratic":
        return 8
    info = SOURCES[spec.dataset]
    return (8 if spec.model in TEXT_MODELS.values() else 4) * math.prod(info.input_shape)


def round_sample_steps(spec: RunSpec, n_train: float) -> float:
    """Sample steps of one round's local training when every device that trains completes its round (an
    upper bound: traces only ever take work away): the given local_steps; else, per device, E updates of
    B samples (local_work steps: Ruan et al. footnote 1, EFL) or E epochs over its n_k samples (epochs);
    with clients_per_round, only the K sampled devices train."""
    if spec.local_steps is not None:
        return float(sum(spec.local_steps)) * spec.batch_size
    share = min(spec.clients_per_round or spec.num_devices, spec.num_devices) / spec.num_devices
    if spec.local_work == "steps":
        return share * spec.num_devices * spec.local_epochs * spec.batch_size
    return share * n_train * spec.local_epochs


def round_local_steps(spec: RunSpec, n_train: float) -> float:
    """Local steps (minibatches) one after another in a round: the largest given local_steps, else E
    (local_work steps), else E passes over a training device's mean n_k samples in B-sample steps (epochs;
    a device above the mean takes more, which the GPU estimate does not count)."""
    if spec.local_steps is not None:
        return float(max(spec.local_steps, default=0))
    if spec.local_work == "steps":
        return float(spec.local_epochs)
    return spec.local_epochs * math.ceil(n_train / spec.num_devices / spec.batch_size)


def _work(spec: RunSpec) -> tuple[float, float, float]:
    """(sample steps of local training, samples evaluated, samples in the federation's training split) of
    a run: round_sample_steps every round; train, local test and global test samples at every evaluated
    round."""
    n = total_samples(spec)
    n_train = n * (1 - spec.test_fraction)
    n_global = SOURCE_SIZES.get(spec.dataset, (0, 0))[1] if spec.global_test else 0
    return round_sample_steps(spec, n_train) * spec.rounds, spec.evaluated_rounds * (n + n_global), n_train


def estimate_run(spec: RunSpec) -> Estimate:
    """One run: local training 3 × forward FLOPs (forward + backward) per sample step (round_sample_steps
    every round), plus a forward pass over train, local test and global test samples at every evaluated
    round."""
    cost = model_cost(spec)
    n = total_samples(spec)
    n_global = SOURCE_SIZES.get(spec.dataset, (0, 0))[1] if spec.global_test else 0
    sample_steps, evaluated, _ = _work(spec)
    per_step = max(3 * cost.flops / cost.rate, MIN_SAMPLE_SECONDS)
    per_eval = max(cost.flops / cost.rate, MIN_SAMPLE_SECONDS / 3)  # forward only: a third of a step
    seconds = sample_steps * per_step + evaluated * per_eval + spec.rounds * ROUND_SECONDS
    # memory: the data (twice: as read from split.npz and as tensors), client-stacked model state (every
    # device: a stateful algorithm keeps one per device), and one minibatch of activations with their
    # gradients per device that trains in a round (engine.runner stacks only those: K of N under
    # clients_per_round)
    data = 2 * (n + n_global) * input_bytes(spec)
    state = STATE_COPIES * 4 * cost.params * spec.num_devices
    trained = min(spec.clients_per_round or spec.num_devices, spec.num_devices)
    acts = 3 * 4 * cost.activations * spec.batch_size * trained
    return Estimate(seconds, BASE_MB + (data + state + acts) / 2**20, cost.gpu)


def estimate(specs: Sequence[RunSpec]) -> Estimate:
    """A job that trains ``specs`` one after another in one process: the runs' times add up (plus one
    process start), memory is the largest run's, and it wants a GPU if any run does."""
    if not specs:
        raise ValueError("estimate: a training job needs at least one run; got none")
    runs = [estimate_run(s) for s in specs]
    return Estimate(START_SECONDS + sum(r.seconds for r in runs), max(r.mem_mb for r in runs),
                    any(r.gpu for r in runs))


def gpu_seconds_run(spec: RunSpec, gpu_gflops: float) -> float:
    """One run on a GPU of ``gpu_gflops`` float32 matmul GFLOP/s, a rough model: the FLOPs of
    ``estimate_run`` at the model's GPU_SHARES of that rate (its evaluation's at GPU_EVAL_SHARES), plus
    GPU_STEP_SECONDS for every local step of every round (round_local_steps) and ROUND_SECONDS a round.
    Measured rates are at 64 clients a round; smaller rounds are slower per client, which the step floor
    stands in for. A model without a measured share (the dense ones, never given a GPU of their own) keeps
    its CPU time."""
    cost = model_cost(spec)
    if not cost.gpu_share:
        return estimate_run(spec).seconds
    sample_steps, evaluated, n_train = _work(spec)
    steps = round_local_steps(spec, n_train)
    flops = cost.flops * (3 * sample_steps / cost.gpu_share + evaluated / cost.gpu_eval_share)
    return (flops / (gpu_gflops * 1e9)
            + spec.rounds * (ROUND_SECONDS + steps * GPU_STEP_SECONDS))


#: the environment variables ClusterOptions.from_environ reads, and it reads no other: a variable added
#: there is added here, or it reads as unset (tests/test_slurm.py clears these before each workflow run,
#: so that a user's own settings leave the tests alone)
ENVIRONMENT = ("HETFL_SLURM_PARTITION", "HETFL_SLURM_GPU_PARTITION", "HETFL_SLURM_ACCOUNT", "SLURM_ACCOUNT",
               "HETFL_GPUS", "HETFL_SLURM_GPU_GRES", "HETFL_SLURM_MAX_RUNTIME", "HETFL_SLURM_MAX_MEM_MB",
               "HETFL_SLURM_LOCAL_SPLIT_MB", "HETFL_SLURM_GPU_GFLOPS")


@dataclass(frozen=True)
class ClusterOptions:
    """Where jobs go, from the environment (docs/cluster.md). ``partition``: HETFL_SLURM_PARTITION (else
    the profile's or the cluster's default); ``gpu_partition``: HETFL_SLURM_GPU_PARTITION for the jobs that
    get a GPU (else ``partition``); ``account``: HETFL_SLURM_ACCOUNT, else SLURM_ACCOUNT (else the
    profile's, or none); ``gpus``: HETFL_GPUS, GPUs per job of a GPU model (0, the default: none; at
    most 1, because `hetfl train` trains on one device); ``gres``: HETFL_SLURM_GPU_GRES, the GRES name
    (``gpu`` or ``gpu:<type>``) under which a GPU job asks ``--gres=<name>:<gpus>`` instead of the
    plugin's ``--gpus=<gpus>``, for clusters without ``select/cons_tres``, where sbatch refuses --gpus;
    ``max_runtime``: HETFL_SLURM_MAX_RUNTIME, a cap in minutes on the time limit asked for (a partition
    rejects a job asking more than its MaxTime; a capped job that runs out is retried, resuming where the
    workflow checkpoints runs); ``max_mem_mb``: HETFL_SLURM_MAX_MEM_MB, a cap on the memory asked for (the
    estimate doubles with each attempt, and a request above every node's memory is refused or pends for
    ever: an audit); ``local_split_mb``: HETFL_SLURM_LOCAL_SPLIT_MB, the largest estimated peak memory
    of a split that runs on the submitting host (``split_on_cluster``; 0: every split is a cluster job);
    ``gpu_gflops``: HETFL_SLURM_GPU_GFLOPS, the float32 matmul GFLOP/s of the cluster's GPUs as `hetfl bench
    --device cuda` prints it, which ``gpu_estimate`` scales its rates by (default GPU_GFLOPS, an H100's)."""

    partition: str | None = None
    gpu_partition: str | None = None
    account: str | None = None
    gpus: int = 0
    max_runtime: int | None = None
    max_mem_mb: int | None = None
    gres: str | None = None
    local_split_mb: int = LOCAL_SPLIT_MB
    gpu_gflops: int = GPU_GFLOPS

    @classmethod
    def from_environ(cls, env: Mapping[str, str]) -> ClusterOptions:
        env = {name: env[name] for name in ENVIRONMENT if name in env}  # the variables it reads: ENVIRONMENT

        def whole(name: str, minimum: int, meaning: str, maximum: int | None = None) -> int | None:
            raw = env.get(name, "").strip()
            if not raw:
                return None
            if not raw.isdigit() or int(raw) < minimum or (maximum is not None and int(raw) > maximum):
                allowed = (f"a whole number >= {minimum}" if maximum is None
                           else f"a whole number from {minimum} to {maximum}")
                raise ValueError(f"environment variable {name} has value {raw!r}, which is not allowed; "
                                 f"allowed: {allowed} ({meaning})")
            return int(raw)

        gres = env.get("HETFL_SLURM_GPU_GRES", "").strip() or None
        if gres is not None and not GRES_NAME.fullmatch(gres):
            raise ValueError(f"environment variable HETFL_SLURM_GPU_GRES has value {gres!r}, which is not "
                             "allowed; allowed: a GRES name and optional type without a count, e.g. 'gpu' "
                             "or 'gpu:a100' (a GPU job asks --gres=<it>:<HETFL_GPUS>)")

        return cls(partition=env.get("HETFL_SLURM_PARTITION") or None,
                   gpu_partition=env.get("HETFL_SLURM_GPU_PARTITION") or None,
                   account=env.get("HETFL_SLURM_ACCOUNT") or env.get("SLURM_ACCOUNT") or None,
                   gpus=whole("HETFL_GPUS", 0, "GPUs per training job of a GPU model; hetfl train "
                              "trains on one device, so a second GPU would sit idle", maximum=1) or 0,
                   max_runtime=whole("HETFL_SLURM_MAX_RUNTIME", 1, "minutes"),
                   max_mem_mb=whole("HETFL_SLURM_MAX_MEM_MB", 256, "MB"),
                   gres=gres, local_split_mb=whole("HETFL_SLURM_LOCAL_SPLIT_MB", 0, "MB of estimated "
                                                   "peak memory; larger splits are cluster jobs")
                   if env.get("HETFL_SLURM_LOCAL_SPLIT_MB", "").strip() else LOCAL_SPLIT_MB,
                   gpu_gflops=whole("HETFL_SLURM_GPU_GFLOPS", 1, "GFLOP/s, the GPUs' float32 matmul rate "
                                    "as `hetfl bench --device cuda` prints it") or GPU_GFLOPS)


def gpu_estimate(specs: Sequence[RunSpec], options: ClusterOptions) -> Estimate:
    """``estimate`` of a job given a GPU: the runs' gpu_seconds_run at ``options.gpu_gflops`` plus one
    process start; the same host memory. A rough model (docs/cluster.md), for the time limit only: the
    job's bundling and grouping keep the CPU estimate, so that every run of a config plans the same jobs."""
    cpu = estimate(specs)
    return Estimate(START_SECONDS + sum(gpu_seconds_run(s, options.gpu_gflops) for s in specs), cpu.mem_mb,
                    cpu.gpu)


def gpus_for(specs: Sequence[RunSpec], options: ClusterOptions) -> int:
    """GPUs the job asks for: ``options.gpus`` for a job with a convolutional or recurrent model, else 0."""
    return options.gpus if estimate(specs).gpu else 0


def resource_names(options: ClusterOptions) -> list[str]:
    """The resources ``train_resources`` sets: slurm_partition and slurm_account only when the environment
    names one, so that the profile's default-resources stay in force otherwise."""
    names = ["mem_mb", "runtime", "gpu"]
    if options.gres:
        names.append("gres")
    if options.partition or (options.gpus and options.gpu_partition):
        names.append("slurm_partition")
    if options.account:
        names.append("slurm_account")
    return names


def train_resources(specs: Sequence[RunSpec], options: ClusterOptions, attempt: int = 1) -> dict[str, object]:
    """The executor resources (``resource_names``) of a job training ``specs``: mem_mb and runtime
    (minutes) are SAFETY × the estimate (runtime: ``gpu_estimate``'s for a job given a GPU), rounded up
    (mem_mb to 256 MB, runtime to whole minutes, at most ``options.max_runtime``) and scaled by the
    attempt, so that a retry after an out-of-memory or time-limit kill asks for more; gpu is
    ``gpus_for`` (0 under ``options.gres``, whose jobs ask ``gres`` "<gres>:<gpus>" instead, None for a
    CPU job); slurm_partition is the GPU partition for a job given a GPU, else the partition (None,
    which Snakemake drops, for a CPU job when only a GPU partition is named: the cluster's default)."""
    est = estimate(specs)
    gpus = gpus_for(specs, options)
    seconds = gpu_estimate(specs, options).seconds if gpus else est.seconds
    runtime = max(1, math.ceil(attempt * SAFETY * seconds / 60))
    mem_mb = 256 * math.ceil(attempt * SAFETY * est.mem_mb / 256)
    values: dict[str, object] = {
        "mem_mb": min(mem_mb, options.max_mem_mb) if options.max_mem_mb else mem_mb,
        "runtime": min(runtime, options.max_runtime) if options.max_runtime else runtime,
        # under HETFL_SLURM_GPU_GRES the GPUs go in the gres string, and gpu 0 keeps the plugin's --gpus out
        "gpu": 0 if options.gres else gpus,
        "gres": f"{options.gres}:{gpus}" if gpus else None,
        "slurm_partition": (options.gpu_partition or options.partition) if gpus else options.partition,
        "slurm_account": options.account,
    }
    return {name: values[name] for name in resource_names(options)}


#: how many cells one training job trains (cells_per_job), finest first; an experiment's `cells_per_job`
#: key forces one of them, or leaves the choice to the estimate ("auto")
CELL_LEVELS = ("cell", "setting", "group")


def cells_per_job(cells: Mapping[str, Sequence[RunSpec]], limit: float = BUNDLE_SECONDS,
                  level: str = "auto") -> str:
    """How many of these cells (split key -> its runs; cells whose runs have the same names up to setting
    and seed, i.e. one rule of the workflow) one training job trains:

    - "group": all of them, when their estimate together is under ``limit``;
    - "setting": those of one setting (every seed), when each setting's estimate is under ``limit`` and
      every setting has the same seeds (the rule's outputs are then its templates over those seeds);
    - "cell": one cell (the runs sharing a split), as large grids do.

    ``level`` (the experiment's `cells_per_job` key) forces one of them instead of the estimate ("auto");
    a forced "setting" is "cell" where the settings' seeds differ.
    A job's runs, outputs, logs and checkpoints are the same whichever it is; only the processes differ."""
    if level not in ("auto", *CELL_LEVELS):
        raise ValueError(f"cells_per_job has value {level!r}, which is not allowed; allowed: auto, "
                         f"{', '.join(CELL_LEVELS)}")
    if not cells:
        raise ValueError("cells_per_job: no cells given")
    specs = [s for runs in cells.values() for s in runs]
    if level == "group" or (level == "auto" and estimate(specs).seconds < limit):
        return "group"
    if level == "cell":
        return "cell"
    by_setting: dict[str, list[RunSpec]] = {}
    seeds: dict[str, set[int]] = {}
    for runs in cells.values():
        by_setting.setdefault(runs[0].setting, []).extend(runs)
        seeds.setdefault(runs[0].setting, set()).add(runs[0].seed)
    if len({frozenset(v) for v in seeds.values()}) > 1:
        return "cell"
    if level == "setting" or all(estimate(runs).seconds < limit for runs in by_setting.values()):
        return "setting"
    return "cell"


def name_template(spec: RunSpec) -> str:
    """The run's name with its setting and seed as Snakemake wildcards ({setting}, {seed})."""
    name = spec.run.replace(f"{spec.setting}_T", "{setting}_T", 1)
    return re.sub(rf"_s{spec.seed}(?=__|$)", "_s{seed}", name, count=1)


def train_groups(cells: Mapping[str, Sequence[RunSpec]]
                 ) -> list[tuple[str, str, tuple[str, ...], list[str]]]:
    """[(experiment, split suffix, name templates, cell keys)], sorted: the cells of an experiment whose runs
    have the same names up to (setting, seed) share one training rule of the workflow
    (workflow/rules/train.smk), whose jobs train one cell, a setting or all of them (cells_per_job)."""
    groups: dict[tuple[str, str, tuple[str, ...]], list[str]] = {}
    for key, specs in cells.items():
        first = specs[0]
        suffix = first.split_setting[len(first.setting):]
        templates = tuple(sorted(name_template(s) for s in specs))
        groups.setdefault((first.experiment, suffix, templates), []).append(key)
    return [(e, suffix, t, keys) for (e, suffix, t), keys in sorted(groups.items())]


def train_device(specs: Sequence[RunSpec], options: ClusterOptions) -> str:
    """`hetfl train --device`: cuda when the job is given a GPU, else cpu."""
    return "cuda" if gpus_for(specs, options) else "cpu"


def train_group(specs: Sequence[RunSpec], options: ClusterOptions) -> str | None:
    """GROUP_SHORT for a CPU job estimated under SHORT_SECONDS (the profile's group-components then
    submits many of them as one cluster job), else None (a job of its own)."""
    est = estimate(specs)
    return GROUP_SHORT if est.seconds < SHORT_SECONDS and not gpus_for(specs, options) else None


def split_mem_mb(dataset: str) -> float:
    """Estimated peak memory (MB) of `hetfl split` on ``dataset``: SPLIT_BASE_MB + SPLIT_COPIES of its
    source's arrays (train + test, SOURCE_SIZES); SPLIT_BASE_MB for the generated data sets (synthetic,
    quadratic), UNSIZED_SPLIT_MB for a source of no known size."""
    info = SOURCES.get(dataset)
    if info is None:
        return float(SPLIT_BASE_MB)
    if dataset not in SOURCE_SIZES:
        return float(UNSIZED_SPLIT_MB)
    item = (4 if info.task == "image" else 8) * math.prod(info.input_shape)
    return SPLIT_BASE_MB + SPLIT_COPIES[info.task] * sum(SOURCE_SIZES[dataset]) * item / 2**20


def split_on_cluster(dataset: str, options: ClusterOptions) -> bool:
    """Whether a split of ``dataset`` is a cluster job: its estimated peak memory is above
    ``options.local_split_mb`` (HETFL_SLURM_LOCAL_SPLIT_MB)."""
    return split_mem_mb(dataset) > options.local_split_mb


def split_placement(experiments: Mapping[str, Mapping[str, object]], options: ClusterOptions
                    ) -> tuple[list[str], list[str]]:
    """(experiments whose splits run on the submitting host, those whose splits are cluster jobs), sorted;
    an experiment's splits all read its one dataset."""
    heavy = {name for name, exp in experiments.items() if split_on_cluster(str(exp["dataset"]), options)}
    return sorted(set(experiments) - heavy), sorted(heavy)


def host_memory_bytes() -> int | None:
    """This machine's physical memory in bytes (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):  # not POSIX, or no such sysconf name
        return None


#: the model_params that size a zoo model: config.SIZE_PARAMS, and vgg11's channel multiplier and layers
_SIZED_BY = SIZE_PARAMS | {"width", "cfg"}


def exact_params(spec: RunSpec) -> int | None:
    """The run's model's parameter count, exactly: the dense models (logreg, mlp) by ``dense_cost``; a zoo
    model whose model_params set a size (config.SIZE_PARAMS: channels, hidden, widths, …; vgg11's width
    and cfg) built on torch's meta device (``_meta_params``); None for the zoo's models at their default
    sizes (at most ZOO_MAX_PARAMS: no torch import at the workflow's start) and the quadratic bed."""
    if spec.model not in MODEL_COSTS:
        return model_cost(spec).params
    if spec.model == "quadratic" or not _SIZED_BY.intersection(spec.model_params):
        return None
    return _meta_params(spec)


#: the most parameters a zoo model has at its default sizes on any registered source (vgg11 on DomainNet's
#: 3×64×64 images: 10,537,354; tests/test_cluster.py builds every pair)
ZOO_MAX_PARAMS = 10_537_354

#: whole copies of the model that a built-in algorithm's state holds for every device, from the first
#: round to the last (init_state's [num_devices, …] stacks: control variates, personalised models, error
#: feedback); tests/test_cluster.py checks every entry against init_state. FedBN's local batch norm is a
#: part of a copy, counted 0; a plugin's state is not known here (0: not checked).
DEVICE_COPIES = {"scaffold": 1, "scaffold_elasticnet": 1, "feddyn": 1, "feddyn_elasticnet": 1, "vrlsgd": 1,
                 "fedgate": 1, "apfl": 1, "fedamp": 1, "topk_ef": 1, "sign_ef": 1, "st_ef": 1, "fedcurv": 2,
                 "efl": 3}


def device_copies(spec: RunSpec) -> int:
    """``DEVICE_COPIES`` of the run's algorithm under its hyperparameters: EFL's broadcast "participants"
    keeps one more, ŵ_k, the model each device last trained from."""
    broadcast = spec.algorithm_params.get("broadcast", "participants")
    extra = spec.algorithm == "efl" and broadcast == "participants"
    return DEVICE_COPIES.get(spec.algorithm, 0) + int(extra)


def _meta_params(spec: RunSpec) -> int:
    """Parameters of the model a run of ``spec`` trains, built as pipeline._make_model builds it (the
    source's input shape and classes, model_params' lists as tuples) on torch's meta device: shapes only,
    so a model of 10**14 parameters is counted without allocating it, and no initialiser runs
    (hetfl.models.meta.shapes_only). Imports torch (about 2 s), which only configs that size a zoo model,
    or whose state could exceed the memory, pay."""
    import torch

    from hetfl.models import make_model
    from hetfl.models.meta import shapes_only

    info = SOURCES[spec.dataset]
    shape = info.input_shape
    input_dim = int(shape[0]) if len(shape) == 1 else tuple(int(d) for d in shape)
    kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in spec.model_params.items()}
    with shapes_only():
        model = make_model(spec.model, input_dim, info.num_classes, **kwargs)
        return sum(p.numel() for p in model.init_params(torch.Generator()))


def gib(n: float) -> str:
    """Bytes in GiB, or TiB from 1,024 GiB on."""
    return f"{n / 2**30:,.1f} GiB" if n < 2**40 else f"{n / 2**40:,.1f} TiB"


#: one SYNTHETIC sample as a split holds it: SYNTHETIC_SHAPE's features in float32 and an int64 label
SYNTHETIC_SAMPLE_BYTES = 4 * SYNTHETIC_SHAPE[0] + 8


def least_synthetic_samples(spec: RunSpec) -> int | None:
    """The fewest samples a SYNTHETIC split of ``spec`` can hold (None for any other data set): every device
    at least ``data.sizes.least_count`` of its sizes."""
    if spec.dataset != "synthetic" or not spec.sizes:
        return None
    return spec.num_devices * least_count(SizeSpec(**spec.sizes))


def check_memory(specs: Sequence[RunSpec], host_bytes: int | None, options: ClusterOptions) -> None:
    """Refuse, before any job runs, a run whose least memory no job of it could have (a ValueError naming
    the experiment, the run, the keys, their values and what is allowed).

    A run's participation trace is a float64 [rounds, num_devices] array that its trace job (a local rule:
    this machine) writes and its training job reads whole, so 8 · rounds · num_devices bytes must fit this
    machine's memory, and so must a SYNTHETIC split's samples (``least_synthetic_samples``: a generated
    data set's split job is a local rule too). One client's minibatch (batch_size samples and their int64
    indices) and the model's float32 parameters (``exact_params``) must fit the largest memory a training
    job can get: this machine's, or HETFL_SLURM_MAX_MEM_MB where that is larger; on a CPU job so must the
    global model and the ``device_copies`` a stateful algorithm keeps for every device (SCAFFOLD's c_k,
    EFL's r_k, u_k, v_k and ŵ_k, …), allocated when training starts. Without these checks
    `rounds: 1099511627776` passed validation, the splits ran, and the trace job failed on a 64 TiB
    allocation; `num_devices: 10000000` failed in the split job (44.7 GiB) and `batch_size: 1000000000`
    in the training job (74.5 GiB); SCAFFOLD with num_devices 5000 on a 1.4 M-parameter MLP (26.4 GiB of
    control variates) had its training job killed by the kernel after 80 s, its log empty. Lower bounds,
    not estimates: a run that passes can still run out of memory."""
    if host_bytes is None:
        return
    limit = max(host_bytes, (options.max_mem_mb or 0) * 2**20)
    where = "this machine's" if limit == host_bytes else "HETFL_SLURM_MAX_MEM_MB's"
    for spec in specs:
        name = f"experiment '{spec.experiment}', run '{spec.run}'"
        need = 8 * spec.rounds * spec.num_devices
        if need > host_bytes:
            raise ValueError(
                f"{name}: rounds {spec.rounds} x num_devices {spec.num_devices} make its participation "
                f"trace a float64 [rounds, num_devices] array of {gib(need)}, more than this machine's "
                f"{gib(host_bytes)} of memory, where trace jobs run; allowed: rounds x num_devices <= "
                f"{host_bytes // 8:,} (rounds <= {host_bytes // (8 * spec.num_devices):,} at num_devices "
                f"{spec.num_devices})")
        least = least_synthetic_samples(spec)
        if least is not None and least * SYNTHETIC_SAMPLE_BYTES > host_bytes:
            raise ValueError(
                f"{name}: num_devices {spec.num_devices:,} with sizes {json.dumps(spec.sizes)} (every device "
                f"at least {least // spec.num_devices:,} samples) make its SYNTHETIC split at least "
                f"{least:,} samples of {SYNTHETIC_SAMPLE_BYTES} bytes ({SYNTHETIC_SHAPE[0]} float32 "
                f"features, an int64 label), {gib(least * SYNTHETIC_SAMPLE_BYTES)}, more than this "
                f"machine's {gib(host_bytes)} of memory, where splits of generated data run; allowed: "
                f"num_devices x the least count <= {host_bytes // SYNTHETIC_SAMPLE_BYTES:,}")
        per_sample = input_bytes(spec) + 8  # the sample as the engine holds it, and its int64 index
        if spec.batch_size * per_sample > limit:
            raise ValueError(
                f"{name}: batch_size {spec.batch_size:,} makes one client's minibatch {spec.batch_size:,} "
                f"samples of {spec.dataset} at {per_sample} bytes each (the input and its int64 index), "
                f"{gib(spec.batch_size * per_sample)}, more than {where} {gib(limit)}, the most a training "
                f"job can have; allowed: batch_size <= {limit // per_sample:,} (a batch larger than a "
                f"device's samples repeats them: docs/aggregation.md, \"Minibatches\")")
        params = exact_params(spec)
        # a stateful algorithm on a CPU job (a GPU job's state is on a card of unknown memory): a zoo model
        # at its default sizes is counted (importing torch) only where its state could exceed the limit
        copies = device_copies(spec) if train_device([spec], options) == "cpu" else 0
        if params is None and copies and spec.model != "quadratic" \
                and 4 * ZOO_MAX_PARAMS * (1 + copies * spec.num_devices) > limit:
            params = _meta_params(spec)
        if params is not None and 4 * params > limit:
            raise ValueError(
                f"{name}: model \"{spec.model}\" with model_params {json.dumps(spec.model_params)} has "
                f"{params:,} parameters, {gib(4 * params)} in float32, more than {where} {gib(limit)}, "
                f"the most a training job can have; allowed: at most {limit // 4:,} parameters, or "
                f"HETFL_SLURM_MAX_MEM_MB set to the cluster nodes' memory (docs/cluster.md)")
        if params is not None and copies and 4 * params * (1 + copies * spec.num_devices) > limit:
            most = (limit // (4 * params) - 1) // copies
            raise ValueError(
                f"{name}: algorithm \"{spec.algorithm}\" keeps {copies} float32 "
                f"{'copy' if copies == 1 else 'copies'} of the model for every device (its control variates, "
                f"personalised models or error feedback, held from the first round to the last), so "
                f"num_devices {spec.num_devices:,} with model \"{spec.model}\" ({params:,} parameters) make "
                f"its state {gib(4 * params * copies * spec.num_devices)} beside the global model, more than "
                f"{where} {gib(limit)}, the most a training job can have; allowed: num_devices <= {most:,} "
                f"with this model and algorithm, a smaller model, an algorithm without per-device state, or "
                f"HETFL_SLURM_MAX_MEM_MB set to the cluster nodes' memory (docs/cluster.md)")


def alternatives(names: Sequence[str]) -> str:
    """A wildcard constraint matching exactly ``names``; one that matches nothing when there are none."""
    return "|".join(re.escape(n) for n in names) or "(?!)"


def split_resource_names(options: ClusterOptions) -> list[str]:
    """The resources ``split_resources`` sets (no GPU: a split is numpy work)."""
    return [n for n in resource_names(options) if n not in ("gpu", "gres")]


def split_resources(dataset: str, options: ClusterOptions, attempt: int = 1) -> dict[str, object]:
    """A split job's executor resources: mem_mb SAFETY × split_mem_mb, rounded up to 256 MB, runtime
    SPLIT_MINUTES, both × the attempt and within the caps; the CPU partition and account when named."""
    mem_mb = 256 * math.ceil(attempt * SAFETY * split_mem_mb(dataset) / 256)
    runtime = attempt * SPLIT_MINUTES
    values: dict[str, object] = {
        "mem_mb": min(mem_mb, options.max_mem_mb) if options.max_mem_mb else mem_mb,
        "runtime": min(runtime, options.max_runtime) if options.max_runtime else runtime,
        "slurm_partition": options.partition,
        "slurm_account": options.account,
    }
    return {name: values[name] for name in split_resource_names(options)}
