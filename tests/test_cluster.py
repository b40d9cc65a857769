"""hetfl.cluster: a training job's memory, time limit, GPU and group from its runs' scale, by hand."""

import dataclasses
import math
import pickle
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from hetfl import cluster
from hetfl.algorithms import CATALOG, make_algorithm
from hetfl.algorithms.base import Task
from hetfl.cluster import ClusterOptions
from hetfl.config import by_cell, expand_runs, validate_config
from hetfl.data.sources import SOURCES
from hetfl.models import make_model


def _runs(**exp):
    base = {"table": "none", "schemes": ["A"], "num_traces": [1], "seeds": [0]}
    return list(expand_runs(validate_config({"experiments": {"e": {**base, **exp}}})))


def _synthetic(**kw):
    """SYNTHETIC logreg: 10 devices × 50 samples, E = 2, 10 rounds, batch 10."""
    exp = {"dataset": "synthetic", "settings": {"N": {"alpha": 1.0, "beta": 1.0}}, "num_devices": 10,
           "sizes": {"distribution": "equal", "size": 50}, "local_epochs": 2, "rounds": 10, "batch_size": 10}
    return _runs(**{**exp, **kw})


def _cnn():
    """McMahan CNN on MNIST: 10 devices dealt the whole 60,000-image train split (sizes "equal" on a real
    dataset: the partitioner's equal split of every sample), E = 1, 2 rounds, batch 10, global test 10,000."""
    return _runs(dataset="mnist", settings={"N": {"partition": {"label_skew": "iid"}}}, num_devices=10,
                 sizes={"distribution": "equal"}, model="cnn", local_epochs=1, rounds=2, batch_size=10)


def test_pareto_expected_size_by_hand():
    # E[min(20·X, 1000)], X ~ Pareto(0.5): 20 + ∫_20^1000 (20/t)^0.5 dt = 20 + 2·√20·(√1000 − √20)
    sizes = {"distribution": "pareto", "size": 20, "index": 0.5, "max_size": 1000, "min_size": 10}
    assert cluster.expected_size(sizes) == pytest.approx(20 + 2 * (math.sqrt(20_000) - 20))  # 262.84
    assert cluster.expected_size({**sizes, "index": 1.0}) == pytest.approx(20 + 20 * math.log(50))
    assert cluster.expected_size({**sizes, "index": 2.0}) == pytest.approx(20 + 400 * (1 / 20 - 1 / 1000))
    assert cluster.expected_size({"distribution": "equal", "size": 5, "min_size": 10, "max_size": 99}) == 10


def test_synthetic_job_by_hand():
    (spec,) = _synthetic()
    # 500 samples, 400 for training; logreg 60 → 10: 610 parameters, 1,200 forward FLOPs per sample
    assert cluster.total_samples(spec) == 500
    assert cluster.model_cost(spec).params == 610 and cluster.model_cost(spec).flops == 1200
    run = cluster.estimate_run(spec)
    # E = 2 local updates (local_work steps, the default) of B = 10 samples on 10 devices for 10 rounds:
    # 2,000 sample steps at the 2.5 µs floor + 10 evaluations × 500 samples × 2.5/3 µs + 10 rounds × 10 ms
    assert run.seconds == pytest.approx(2000 * 2.5e-6 + 10 * 500 * 2.5e-6 / 3 + 0.1)
    # data 2 × 500 × 240 B, state 4 × 4 B × 610 × 10, activations 12 B × 10 × 10 × 10
    assert run.mem_mb == pytest.approx(1000 + (240_000 + 97_600 + 12_000) / 2**20)
    assert not run.gpu
    res = cluster.train_resources([spec], ClusterOptions())
    assert res == {"mem_mb": 2048, "runtime": 2, "gpu": 0}  # 2 × 1000.33 MB; 2 × 30.11 s → 2 minutes
    assert cluster.train_resources([spec], ClusterOptions(), attempt=2) == \
        {"mem_mb": 4096, "runtime": 3, "gpu": 0}  # a retry asks for twice as much: 4 × 30.11 s → 3 min
    assert cluster.train_group([spec], ClusterOptions()) == cluster.GROUP_SHORT
    assert cluster.train_device([spec], ClusterOptions(gpus=1)) == "cpu"  # logreg never gets a GPU


def test_local_work_and_client_sampling_set_the_training_by_hand():
    """Sample steps per round: E·B per training device (steps) or E·n_k (epochs); with clients_per_round K
    of N, K devices train. 10 devices × 40 training samples, E = 2, B = 10, 10 rounds."""
    def train_steps(**kw):
        (spec,) = _synthetic(**kw)
        evals = 10 * 500 * 2.5e-6 / 3 + 0.1
        return (cluster.estimate_run(spec).seconds - evals) / 2.5e-6
    assert train_steps() == pytest.approx(10 * 2 * 10 * 10)  # 2,000
    assert train_steps(local_work="epochs") == pytest.approx(400 * 2 * 10)  # 8,000
    assert train_steps(clients_per_round=5) == pytest.approx(5 * 2 * 10 * 10)  # 1,000
    assert train_steps(local_work="epochs", clients_per_round=5) == pytest.approx(200 * 2 * 10)  # 4,000


def test_cnn_job_by_hand():
    (spec,) = _cnn()
    run = cluster.estimate_run(spec)
    # 10 devices × E = 1 update × B = 10 × 2 rounds = 200 sample steps × 3 × 24.5 MFLOP / 15 GFLOP/s;
    # 2 evaluations × (60,000 + 10,000) samples: every device's train and test samples, the global test
    train_s = 200 * 3 * 24.5e6 / 15e9
    eval_s = 2 * 70_000 * 24.5e6 / 15e9
    assert run.seconds == pytest.approx(train_s + eval_s + 0.02)
    # data 2 × 70,000 × 3,136 B; state 4 × 4 B × 1,663,370 × 10; activations 12 B × 90,000 × 10 × 10
    assert run.mem_mb == pytest.approx(1000 + (439_040_000 + 266_139_200 + 108_000_000) / 2**20)
    # clients_per_round = 2: only the 2 sampled devices' activations (it counted all 10, an audit's doubt)
    (sampled,) = _runs(dataset="mnist", settings={"N": {"partition": {"label_skew": "iid"}}}, num_devices=10,
                       sizes={"distribution": "equal"}, model="cnn", local_epochs=1, rounds=2, batch_size=10,
                       clients_per_round=2)
    assert cluster.estimate_run(sampled).mem_mb == pytest.approx(
        1000 + (439_040_000 + 266_139_200 + 108_000_000 // 5) / 2**20)
    cpu = cluster.train_resources([spec], ClusterOptions())
    # 2 × 1,775.5 MB → 14 × 256; 2 × (30 s start + 229.7 s) → 9 min
    assert cpu == {"mem_mb": 3584, "runtime": 9, "gpu": 0}
    gpu = ClusterOptions(partition="cpu", gpu_partition="gpu", account="fl", gpus=1)
    # the GPU job's time limit is the GPU estimate's (test_a_gpu_jobs_time_is_the_gpu_models): 2 × 30.5 s
    assert cluster.train_resources([spec], gpu) == {"mem_mb": 3584, "runtime": 2, "gpu": 1,
                                                     "slurm_partition": "gpu", "slurm_account": "fl"}
    assert cluster.train_device([spec], gpu) == "cuda"
    assert cluster.train_group([spec], gpu) is None  # a GPU job is never grouped
    assert cluster.train_group([spec], ClusterOptions()) == cluster.GROUP_SHORT  # 260 s on a CPU


def test_a_gpu_jobs_time_is_the_gpu_models():
    """A job given a GPU asked for the time a CPU core would take (hours where the GPU takes minutes). Its
    time is now a rough GPU model: the FLOPs at the engine's share of the card's float32 matmul rate (H100,
    64 clients a round: the CNN 20.7 %, docs/engine-measurements.md; its evaluation of the global model
    58.7 %) of HETFL_SLURM_GPU_GFLOPS (default the H100's 43,400), plus 60 ms a local step for the
    launch-bound block step, 10 ms a round, 30 s to start."""
    (spec,) = _cnn()
    # 200 sample steps × 3 × 24.5 MFLOP; 2 evaluations × 70,000 samples × 24.5 MFLOP; 2 rounds of E = 1 step
    train_s, eval_s = 200 * 3 * 24.5e6 / (0.207 * 43_400e9), 2 * 70_000 * 24.5e6 / (0.587 * 43_400e9)
    gpu = cluster.gpu_estimate([spec], ClusterOptions(gpus=1))
    assert gpu.seconds == pytest.approx(30 + train_s + eval_s + 2 * (0.01 + 0.06))
    assert gpu.mem_mb == cluster.estimate([spec]).mem_mb  # host memory: the same data and state
    assert cluster.train_resources([spec], ClusterOptions(gpus=1))["runtime"] == 2  # CPU: 9 min
    # a slower card (hetfl bench --device cuda prints its matmul GFLOP/s) asks for more: the EMNIST grid
    emnist = _runs(dataset="emnist-byclass", settings={"N": {"partition": {"label_skew": "iid"}}},
                   num_devices=62, model="cnn", local_epochs=5, rounds=200, batch_size=10)
    h100 = cluster.train_resources(emnist, ClusterOptions(gpus=1))["runtime"]
    a100 = cluster.train_resources(emnist, ClusterOptions(gpus=1, gpu_gflops=19_000))["runtime"]
    cpu = cluster.train_resources(emnist, ClusterOptions())["runtime"]
    assert h100 < a100 < cpu / 50
    assert ClusterOptions.from_environ({"HETFL_SLURM_GPU_GFLOPS": "19000"}).gpu_gflops == 19_000
    assert ClusterOptions.from_environ({}).gpu_gflops == cluster.GPU_GFLOPS == 43_400
    with pytest.raises(ValueError, match=r"HETFL_SLURM_GPU_GFLOPS has value '19T'.*>= 1 \(GFLOP/s"):
        ClusterOptions.from_environ({"HETFL_SLURM_GPU_GFLOPS": "19T"})
    # every model that may get a GPU has a share of the matmul rate; a dense run keeps its CPU time
    assert all(c.gpu_share > 0 and c.gpu_eval_share > 0 for c in cluster.MODEL_COSTS.values() if c.gpu)
    (dense,) = _synthetic()
    assert cluster.gpu_seconds_run(dense, 43_400) == cluster.estimate_run(dense).seconds


def test_equal_sizes_on_a_real_dataset_count_the_whole_split():
    """sizes "equal" on a real dataset deals every sample of the train split (data.build.build_from_source),
    whatever num_devices: the estimate counted `size` (default 20) a device, 2,000 samples for Ma et al.'s
    100-device MNIST table where the split holds 60,000 (an audit found it). SYNTHETIC's equal sizes are
    `size` a device; pareto sizes on a real dataset their expected size, within the split."""
    (real,) = _cnn()
    assert cluster.total_samples(real) == 60_000
    assert cluster.total_samples(dataclasses.replace(real, num_devices=100)) == 60_000
    pareto = {"distribution": "pareto", "size": 20, "index": 0.5, "max_size": 1000, "min_size": 10}
    assert cluster.total_samples(dataclasses.replace(real, sizes=pareto)) == pytest.approx(
        10 * cluster.expected_size(pareto))
    (synthetic,) = _synthetic()
    assert cluster.total_samples(synthetic) == synthetic.num_devices * synthetic.sizes["size"]


def test_a_cell_adds_up_its_runs():
    specs = _synthetic(schemes=["A", "B", "C"])
    one = cluster.estimate_run(specs[0])
    job = cluster.estimate(specs)
    assert job.seconds == pytest.approx(cluster.START_SECONDS + 3 * one.seconds)
    assert job.mem_mb == one.mem_mb  # runs one after another: the largest, not the sum
    with pytest.raises(ValueError, match="at least one run"):
        cluster.estimate([])


def test_short_cells_share_a_job_by_group_then_by_setting():
    """Two settings × two seeds (4 cells): one job for all while the four are short together, one per setting
    while each setting is, one per cell past that or when the settings' seeds differ."""
    settings = {"N": {"alpha": 1.0, "beta": 1.0}, "M": {"alpha": 0.5, "beta": 0.5}}
    cells = by_cell(_synthetic(settings=settings, seeds=[0, 1], schemes=["A", "B"]))
    assert len(cells) == 4
    whole = cluster.estimate([s for runs in cells.values() for s in runs]).seconds
    setting = cluster.estimate([s for runs in cells.values() for s in runs if s.setting == "N"]).seconds
    assert setting < whole  # the arithmetic below: each limit sits between two of these
    assert cluster.cells_per_job(cells, limit=whole + 1) == "group"
    assert cluster.cells_per_job(cells, limit=whole) == "setting"
    assert cluster.cells_per_job(cells, limit=setting) == "cell"
    uneven = {k: v for k, v in cells.items() if not (v[0].setting == "M" and v[0].seed == 1)}
    rest = cluster.estimate([s for runs in uneven.values() for s in runs]).seconds
    assert setting < rest and cluster.cells_per_job(uneven, limit=rest + 1) == "group"
    assert cluster.cells_per_job(uneven, limit=rest) == "cell"  # M has one seed, N two: no common outputs
    assert cluster.cells_per_job(cells) == "group"  # the default limit: these are seconds of work
    with pytest.raises(ValueError, match="no cells"):
        cluster.cells_per_job({})


def test_an_experiments_cells_per_job_forces_the_level():
    """The `cells_per_job` key overrides the estimate either way; a forced "setting" needs every setting to
    have the same seeds (else one cell per job, as the estimate's choice would be)."""
    settings = {"N": {"alpha": 1.0, "beta": 1.0}, "M": {"alpha": 0.5, "beta": 0.5}}
    cells = by_cell(_synthetic(settings=settings, seeds=[0, 1], schemes=["A", "B"]))
    assert cluster.cells_per_job(cells) == "group"  # seconds of work: the estimate bundles them all
    assert [cluster.cells_per_job(cells, level=lv) for lv in ("cell", "setting", "group")] == \
        ["cell", "setting", "group"]
    whole = cluster.estimate([s for runs in cells.values() for s in runs]).seconds
    assert cluster.cells_per_job(cells, limit=1.0, level="group") == "group"  # over the limit, forced
    assert cluster.cells_per_job(cells, limit=whole, level="auto") == "setting"
    uneven = {k: v for k, v in cells.items() if not (v[0].setting == "M" and v[0].seed == 1)}
    assert cluster.cells_per_job(uneven, level="setting") == "cell"
    with pytest.raises(ValueError, match="value 'each'.*allowed: auto, cell, setting, group"):
        cluster.cells_per_job(cells, level="each")


def test_train_groups_share_a_rule_by_name_template():
    """Cells whose runs have the same names up to (setting, seed) share a rule; a reading that changes the
    data (iid) has its own split directory, hence its own rule; templates carry the two wildcards."""
    settings = {"I": {"alpha": 0.0, "beta": 0.0, "iid": True}, "J": {"alpha": 0.0, "beta": 0.0, "iid": True}}
    specs = _synthetic(settings=settings, seeds=[0, 1], schemes=["A"], readings={"iid": [False]})
    groups = cluster.train_groups(by_cell(specs))
    assert [(e, suffix, len(keys)) for e, suffix, _, keys in groups] == \
        [("e", "", 4), ("e", "__iid-false", 4)]
    assert groups[0][2] == ("{setting}_T1_A_s{seed}",)
    assert cluster.name_template(specs[0]) in groups[0][2]


def test_long_jobs_are_not_grouped_and_capped_by_the_environment():
    (spec,) = _synthetic(rounds=20_000, sizes={"distribution": "equal", "size": 1000}, local_work="epochs")
    assert cluster.estimate([spec]).seconds > cluster.SHORT_SECONDS
    assert cluster.train_group([spec], ClusterOptions()) is None
    capped = cluster.train_resources([spec], ClusterOptions(max_runtime=30))
    assert capped["runtime"] == 30 < cluster.train_resources([spec], ClusterOptions())["runtime"]
    # memory doubles with the attempt, up to HETFL_SLURM_MAX_MEM_MB (uncapped, a retry could ask for more
    # than any node has and pend for ever: an audit)
    free = cluster.train_resources([spec], ClusterOptions(), attempt=2)["mem_mb"]
    held = cluster.train_resources([spec], ClusterOptions(max_mem_mb=1024), attempt=2)["mem_mb"]
    assert held == 1024 < free


def test_partition_only_where_the_environment_names_one():
    (spec,) = _synthetic()
    assert cluster.resource_names(ClusterOptions()) == ["mem_mb", "runtime", "gpu"]
    only_gpu = ClusterOptions(gpu_partition="gpu", gpus=1)
    assert cluster.train_resources([spec], only_gpu)["slurm_partition"] is None  # CPU job: cluster default
    assert cluster.train_resources(_cnn(), only_gpu)["slurm_partition"] == "gpu"
    assert "slurm_partition" not in cluster.train_resources(_cnn(), ClusterOptions(gpu_partition="gpu"))


def test_options_from_the_environment():
    env = {"HETFL_SLURM_PARTITION": "cpu", "SLURM_ACCOUNT": "lab", "HETFL_GPUS": "1",
           "HETFL_SLURM_MAX_RUNTIME": "2880"}
    assert ClusterOptions.from_environ(env) == ClusterOptions("cpu", None, "lab", 1, 2880)
    assert ClusterOptions.from_environ({"HETFL_SLURM_MAX_MEM_MB": "65536"}).max_mem_mb == 65536
    with pytest.raises(ValueError, match=r"HETFL_SLURM_MAX_MEM_MB has value '100'.*>= 256 \(MB\)"):
        ClusterOptions.from_environ({"HETFL_SLURM_MAX_MEM_MB": "100"})
    assert ClusterOptions.from_environ({**env, "HETFL_SLURM_ACCOUNT": "fl"}).account == "fl"
    assert ClusterOptions.from_environ({}) == ClusterOptions()
    with pytest.raises(ValueError, match=r"HETFL_GPUS has value 'one'.*allowed: a whole number from 0 to 1"):
        ClusterOptions.from_environ({"HETFL_GPUS": "one"})
    with pytest.raises(ValueError, match=r"HETFL_SLURM_MAX_RUNTIME has value '0'.*>= 1"):
        ClusterOptions.from_environ({"HETFL_SLURM_MAX_RUNTIME": "0"})


def test_one_gpu_at_most_and_gres_for_clusters_that_refuse_gpus():
    """hetfl train uses one device, so HETFL_GPUS=2 held an idle GPU; clusters without select/cons_tres
    refuse the plugin's --gpus, and HETFL_SLURM_GPU_GRES asks --gres=<name>:<n> instead."""
    with pytest.raises(ValueError, match=r"HETFL_GPUS has value '2'.*a whole number from 0 to 1.*one device"):
        ClusterOptions.from_environ({"HETFL_GPUS": "2"})
    gres = ClusterOptions.from_environ({"HETFL_GPUS": "1", "HETFL_SLURM_GPU_GRES": "gpu:a100"})
    assert gres.gres == "gpu:a100"
    (spec,) = _synthetic()
    assert cluster.resource_names(gres) == ["mem_mb", "runtime", "gpu", "gres"]
    on_gpu = cluster.train_resources(_cnn(), gres)
    assert (on_gpu["gpu"], on_gpu["gres"]) == (0, "gpu:a100:1")  # gpu 0: the plugin adds no --gpus
    on_cpu = cluster.train_resources([spec], gres)
    assert (on_cpu["gpu"], on_cpu["gres"]) == (0, None)
    assert "gres" not in cluster.train_resources(_cnn(), ClusterOptions(gpus=1))
    for bad in ("gpu:2", "gpu:a100:1", "'gpu'", "gpu a100"):
        with pytest.raises(ValueError, match=rf"HETFL_SLURM_GPU_GRES has value {bad!r}.*e\.g\. 'gpu'"):
            ClusterOptions.from_environ({"HETFL_SLURM_GPU_GRES": bad})


def test_dense_models_are_sized_from_the_data():
    (spec,) = _runs(dataset="mnist5k", settings={"N": {"partition": {"label_skew": "iid"}}}, model="mlp",
                    model_params={"hidden": [200, 100]})
    cost = cluster.model_cost(spec)
    assert cost.params == 785 * 200 + 201 * 100 + 101 * 10
    assert cost.flops == 2 * (784 * 200 + 200 * 100 + 100 * 10)


@pytest.mark.parametrize("name", sorted(set(cluster.MODEL_COSTS) - {"quadratic"}))
def test_model_table_matches_the_models(name):
    """The table's parameters and forward FLOPs are those of hetfl.models at the reference input."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    from hetfl.models import make_model

    shape, classes = {"cnn_cifar": ((3, 32, 32), 10), "vgg11": ((3, 32, 32), 10),
                      "resnet20": ((3, 32, 32), 10), "resnet_emnist": ((1, 28, 28), 62),
                      "char_lstm": ((80,), 80), "sent_lstm": ((25,), 2)}.get(name, ((1, 28, 28), 10))
    module = make_model(name, shape if len(shape) > 1 else shape[0], classes).make_module()
    if isinstance(getattr(module, "lstm", None), torch.nn.LSTM):
        # the fused kernel's FLOPs are invisible to FlopCounterMode: count its matmul twin's (same parameters)
        from hetfl.models.zoo import LSTM

        lstm = module.lstm
        module.lstm = LSTM(lstm.input_size, lstm.hidden_size, lstm.num_layers)
    x = torch.zeros((1, *shape), dtype=torch.long if len(shape) == 1 else torch.float32)
    with FlopCounterMode(display=False) as counter:
        module(x)
    cost = cluster.MODEL_COSTS[name]
    assert cost.params == sum(p.numel() for p in module.parameters())
    assert cost.flops == pytest.approx(counter.get_total_flops(), rel=0.01)


@pytest.mark.parametrize("name", ["resnet20", "resnet_emnist"])
def test_batch_norm_resnets_cost_what_the_table_says(name):
    """norm: batch (FedFOR Table 2's ResNet-20) trains the same parameters with the same convolutions as
    the GroupNorm model the table was counted on; its running statistics (2 per channel: 1,376 entries,
    0.5 % of ResNet-20's) are left to the requests' margin, as cnn_bn's."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    from hetfl.models import make_model

    shape, classes = {"resnet20": ((3, 32, 32), 10), "resnet_emnist": ((1, 28, 28), 62)}[name]
    module = make_model(name, shape, classes, norm="batch").make_module()
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in module.modules())
    with FlopCounterMode(display=False) as counter:
        module(torch.zeros((2, *shape)))
    cost = cluster.MODEL_COSTS[name]
    assert cost.params == sum(p.numel() for p in module.parameters())
    assert cost.flops == pytest.approx(counter.get_total_flops() / 2, rel=0.01)


def test_fedfor_table2_estimate_is_the_group_norm_models():
    """A Table 2 run (norm: batch) is estimated as the same run of the GroupNorm model (above)."""
    from pathlib import Path

    from hetfl.config import load_config

    config = Path(__file__).resolve().parents[1] / "workflow/config/paper/tian2022_fedfor_table2.yaml"
    spec = next(iter(expand_runs(load_config(config))))
    assert spec.model_params == {"norm": "batch"}
    assert cluster.estimate_run(spec) == cluster.estimate_run(dataclasses.replace(spec, model_params={}))


def test_splits_of_large_sources_are_cluster_jobs():
    """`hetfl split` loads its whole source: EMNIST-byclass needs ~10 GB, more than a login node should
    carry, while SYNTHETIC and the small sources need a few hundred MB. The rule: a split whose estimated
    peak memory is above HETFL_SLURM_LOCAL_SPLIT_MB (1,024 MB) is a cluster job (docs/cluster.md)."""
    from hetfl.data.sources import SOURCES

    options = ClusterOptions()
    names = ["synthetic", "quadratic", *SOURCES]
    assert {n for n in names if cluster.split_on_cluster(n, options)} == {
        "emnist-balanced", "emnist-byclass", "emnist-letters", "cifar10", "cifar100", "femnist",
        "shakespeare", "sent140", "domainnet", "digit5"}
    # by hand: the base + copies × the source's arrays (float32 pixels, int64 token ids), in MB
    assert cluster.split_mem_mb("synthetic") == cluster.SPLIT_BASE_MB == 120
    assert cluster.split_mem_mb("mnist") == pytest.approx(120 + 4 * 70_000 * 784 * 4 / 2**20)  # 957 MB
    assert cluster.split_mem_mb("sent140") == pytest.approx(120 + 12 * 1_600_359 * 25 * 8 / 2**20)
    assert cluster.split_mem_mb("domainnet") == cluster.UNSIZED_SPLIT_MB  # size of the prepared copy
    byclass = 120 + 4 * 814_255 * 784 * 4 / 2**20  # 9,860 MB
    assert cluster.split_resources("emnist-byclass", options) == {
        "mem_mb": 256 * math.ceil(2 * byclass / 256), "runtime": cluster.SPLIT_MINUTES}
    retry = cluster.split_resources("emnist-byclass", options, attempt=2)
    assert retry == {"mem_mb": 256 * math.ceil(4 * byclass / 256), "runtime": 2 * cluster.SPLIT_MINUTES}
    placed = ClusterOptions(partition="cpu", account="lab", max_runtime=30, max_mem_mb=4096, gpus=1)
    assert cluster.split_resources("cifar100", placed) == {"mem_mb": 4096, "runtime": 30,
                                                           "slurm_partition": "cpu", "slurm_account": "lab"}


def test_where_splits_run_is_the_environments_to_change():
    """HETFL_SLURM_LOCAL_SPLIT_MB moves the line: a large value keeps every split on the submitting host
    (compute nodes that cannot read the data), 0 sends every split to the cluster."""
    experiments = {"syn": {"dataset": "synthetic"}, "em": {"dataset": "emnist-letters"},
                   "m": {"dataset": "mnist"}}
    assert cluster.split_placement(experiments, ClusterOptions()) == (["m", "syn"], ["em"])
    keep = ClusterOptions.from_environ({"HETFL_SLURM_LOCAL_SPLIT_MB": "100000"})
    assert keep.local_split_mb == 100_000
    assert cluster.split_placement(experiments, keep) == (["em", "m", "syn"], [])
    spread = ClusterOptions.from_environ({"HETFL_SLURM_LOCAL_SPLIT_MB": "0"})
    assert cluster.split_placement(experiments, spread) == ([], ["em", "m", "syn"])
    with pytest.raises(ValueError, match=r"HETFL_SLURM_LOCAL_SPLIT_MB has value '1G'.*>= 0 \(MB"):
        ClusterOptions.from_environ({"HETFL_SLURM_LOCAL_SPLIT_MB": "1G"})
    # a wildcard constraint of those experiments' names; none: a pattern that matches nothing
    assert cluster.alternatives(["a.b", "c"]) == r"a\.b|c"
    assert not re.fullmatch(cluster.alternatives([]), "")


def test_check_memory_refuses_a_trace_this_machine_cannot_hold():
    """A trace is a float64 [rounds, num_devices] array its trace job (a local rule) writes: 8·R·N bytes
    must fit this machine. `rounds: 1099511627776` had passed validation, the splits ran, and the trace
    job failed on a 64 TiB allocation."""
    (spec,) = _synthetic(rounds=1000, sizes={"distribution": "equal", "size": 10})  # 10 devices: 80,000 bytes
    cluster.check_memory([spec], 80_000, ClusterOptions())  # exactly fits
    with pytest.raises(ValueError) as err:
        cluster.check_memory([spec], 79_999, ClusterOptions(max_mem_mb=10**6))  # a cluster does not help
    msg = str(err.value)
    assert "experiment 'e', run 'N_T1_A_s0'" in msg and "rounds 1000 x num_devices 10" in msg
    assert "allowed: rounds x num_devices <= 9,999 (rounds <= 999 at num_devices 10)" in msg
    cluster.check_memory([spec], None, ClusterOptions())  # a machine that does not say: no check


def test_check_memory_refuses_a_model_no_training_job_can_hold():
    """The model's float32 parameters must fit this machine, or HETFL_SLURM_MAX_MEM_MB where larger."""
    (spec,) = _synthetic(model="mlp", model_params={"hidden": [2**20]}, sizes={"distribution": "equal",
                                                                               "size": 10})
    params = (60 + 1) * 2**20 + (2**20 + 1) * 10  # 60 → 2**20 → 10, biases included
    assert cluster.exact_params(spec) == params
    need = 4 * params  # 271,581,224 bytes
    trace = 8 * 10 * 10 + 10 * 10 * 248  # this machine holds the trace and the split (below), no more
    cluster.check_memory([spec], need, ClusterOptions())
    with pytest.raises(ValueError) as err:
        cluster.check_memory([spec], need - 1, ClusterOptions())
    msg = str(err.value)
    assert f'model "mlp" with model_params {{"hidden": [1048576]}} has {params:,} parameters' in msg
    assert "more than this machine's" in msg and f"allowed: at most {(need - 1) // 4:,} parameters" in msg
    cluster.check_memory([spec], trace, ClusterOptions(max_mem_mb=need // 2**20 + 1))  # a cluster node
    with pytest.raises(ValueError, match="more than HETFL_SLURM_MAX_MEM_MB's"):
        cluster.check_memory([spec], trace, ClusterOptions(max_mem_mb=need // 2**20 - 1))


def test_check_memory_refuses_a_synthetic_split_this_machine_cannot_hold():
    """A SYNTHETIC split is generated by a local split job: every device's samples (60 float32 features and
    an int64 label, 248 bytes) must fit this machine. `num_devices: 10000000` passed validation and the split
    job failed on a 44.7 GiB allocation (an extreme-value probe)."""
    (spec,) = _synthetic()  # 10 devices of exactly 50 samples: 124,000 bytes
    assert cluster.least_synthetic_samples(spec) == 500
    cluster.check_memory([spec], 124_000, ClusterOptions())
    with pytest.raises(ValueError) as err:
        cluster.check_memory([spec], 123_999, ClusterOptions(max_mem_mb=10**6))  # a cluster does not help
    msg = str(err.value)
    assert "experiment 'e', run 'N_T1_A_s0': num_devices 10 with sizes" in msg
    assert "(every device at least 50 samples) make its SYNTHETIC split at least 500 samples of 248 bytes" \
        in msg and "allowed: num_devices x the least count <= 499" in msg
    # pareto: floor(size · X) with X >= 1 is at least size; lognormal: at least min_size; equal and pareto
    # clipped to min_size (size 5 holds 10)
    pareto = {"distribution": "pareto", "size": 30, "index": 0.5, "min_size": 10, "max_size": 1000}
    assert cluster.least_synthetic_samples(_synthetic(sizes=pareto)[0]) == 300
    assert cluster.least_synthetic_samples(_synthetic(sizes={**pareto, "size": 5})[0]) == 100
    lognormal = {"distribution": "lognormal", "size": 30, "sigma": 1.0, "min_size": 3, "max_size": 1000}
    assert cluster.least_synthetic_samples(_synthetic(sizes=lognormal)[0]) == 30
    assert cluster.least_synthetic_samples(_cnn()[0]) is None  # a real source's samples are its own


def test_check_memory_refuses_a_minibatch_no_training_job_can_hold():
    """One client's minibatch (batch_size inputs and their int64 indices) must fit a training job.
    `batch_size: 1000000000` passed validation and the training job failed on a 74.5 GiB index array."""
    (spec,) = _synthetic(batch_size=10**6, sizes={"distribution": "equal", "size": 10})
    batch = 10**6 * (60 * 4 + 8)  # 248,000,000 bytes
    cluster.check_memory([spec], batch, ClusterOptions())
    with pytest.raises(ValueError) as err:
        cluster.check_memory([spec], batch - 1, ClusterOptions())
    msg = str(err.value)
    assert "batch_size 1,000,000 makes one client's minibatch 1,000,000 samples of synthetic at 248 bytes" \
        in msg and "allowed: batch_size <= 999,999" in msg
    cluster.check_memory([spec], 30_000, ClusterOptions(max_mem_mb=batch // 2**20 + 1))  # a cluster node
    (cnn,) = _cnn()  # MNIST images: 784 float32 pixels, 3,144 bytes with the index
    with pytest.raises(ValueError, match="minibatch 10 samples of mnist at 3144 bytes each"):
        cluster.check_memory([cnn], 31_439, ClusterOptions())


def _state_entries(state) -> int:
    """Tensor entries anywhere in an algorithm's state (dicts, lists, tensors, None)."""
    if isinstance(state, torch.Tensor):
        return state.numel() if state.is_floating_point() else 0
    if isinstance(state, dict):
        return sum(_state_entries(v) for v in state.values())
    if isinstance(state, list | tuple):
        return sum(_state_entries(v) for v in state)
    return 0


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_device_copies_are_what_init_state_allocates(name):
    """DEVICE_COPIES against every built-in algorithm's init_state: the float entries one more device adds
    are the table's whole copies of the model (FedBN: a part of one, its batch norm; APFL: and α_k), for
    each value of a hyperparameter that changes the state (EFL's broadcast). A new stateful algorithm, or a
    change to one's state, fails here until the table says so."""
    model = make_model("cnn_bn", (1, 8, 8), 3, channels=(2, 4))
    params = model.init_params(torch.Generator().manual_seed(0))
    size = sum(p.numel() for p in params)
    x, y = torch.zeros(6, 1, 8, 8), torch.zeros(6, dtype=torch.long)
    variants = [{"broadcast": "participants"}, {"broadcast": "all"}] if name == "efl" else [{}]
    for hp in variants:
        algorithm = make_algorithm(name, hp)
        algorithm.setup(Task(model, x, y, np.array([0, 2, 4, 6])))
        per_device = (_state_entries(algorithm.init_state(params, 3))
                      - _state_entries(algorithm.init_state(params, 2)))
        (spec,) = _synthetic(algorithm=name, algorithm_params={name: hp} if hp else {},
                             schemes=["C" if name == "efl" else "A"])
        copies = cluster.device_copies(spec)
        assert copies * size <= per_device < (copies + 1) * size, (name, hp, per_device / size)
        # beyond the copies: APFL's mixing weight α_k, one float a device; FedBN's batch norm, a part of one
        assert per_device - copies * size <= (1 if name != "fedbn" else size - 1)
        assert (per_device > copies * size) == (name in ("apfl", "fedbn"))


@pytest.mark.filterwarnings("ignore:Initializing zero-element")  # vgg11 on 28×28 (refused by validation)
def test_zoo_max_params_is_the_largest_default_zoo_model():
    """ZOO_MAX_PARAMS bounds every zoo model at its default sizes on every source it builds on (the gate
    below which check_memory counts no default-sized model's state)."""
    counts = []
    for model_name in set(cluster.MODEL_COSTS) - {"quadratic"}:
        for source in SOURCES.values():
            shape = source.input_shape
            dim = int(shape[0]) if len(shape) == 1 else tuple(int(d) for d in shape)
            try:
                with torch.device("meta"):
                    model = make_model(model_name, dim, source.num_classes)
            except (ValueError, RuntimeError, TypeError):
                continue  # a model this source's input does not build (validation refuses the pair)
            counts.append(sum(p.numel() for p in model.init_params(torch.Generator())))
    assert max(counts) == cluster.ZOO_MAX_PARAMS


_COUNT_IN_A_FRESH_PROCESS = """
import pickle, sys
from hetfl import cluster
counts = [cluster.exact_params(spec) for spec in pickle.load(sys.stdin.buffer)]
print(counts, "torch._dynamo" in sys.modules)
"""


def test_a_model_counted_at_the_workflows_start_runs_no_initialiser():
    """torch's meta kernel of normal_ imports torch._dynamo (4 s): nn.Embedding's and kaiming_normal_'s
    initialisers on the meta device made every Snakemake start of an EFL text config 7 s longer (8.7 s for a
    dry run of ma2022_efl_text, 4.0 s now). _meta_params builds under hetfl.models.meta.shapes_only, which
    skips the initialisers: the same counts as the models built on the CPU, and torch._dynamo not imported."""
    specs = [dataclasses.replace(_cnn()[0], model=model, dataset=dataset, model_params=params)
             for model, dataset, params in (("sent_lstm", "sent140", {"hidden": 64}),
                                            ("char_lstm", "shakespeare", {"embed": 16}),
                                            ("resnet20", "cifar10", {"widths": [8, 16, 32]}))]
    built = []
    for spec in specs:
        shape = SOURCES[spec.dataset].input_shape
        dim = int(shape[0]) if len(shape) == 1 else tuple(int(d) for d in shape)
        kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in spec.model_params.items()}
        model = make_model(spec.model, dim, SOURCES[spec.dataset].num_classes, **kwargs)
        built.append(sum(p.numel() for p in model.init_params(torch.Generator())))
    out = subprocess.run([sys.executable, "-c", _COUNT_IN_A_FRESH_PROCESS], input=pickle.dumps(specs),
                         capture_output=True, check=True)
    assert out.stdout.decode().split() == [*str(built).split(), "False"], out.stderr.decode()[-2000:]


def test_check_memory_refuses_per_device_state_no_training_job_can_hold():
    """A stateful algorithm allocates its per-device copies of the model when training starts: the global
    model and DEVICE_COPIES × num_devices copies must fit a CPU job. SCAFFOLD with num_devices 5000 on a
    1.4 M-parameter MLP passed validation, the split and trace ran, and the kernel killed the training job
    after 80 s (26.4 GiB of control variates on a 23.5 GiB machine), its log empty."""
    mlp = {"model": "mlp", "model_params": {"hidden": [100]}, "sizes": {"distribution": "equal", "size": 10}}
    params = 61 * 100 + 101 * 10  # 7,110
    (fedavg,) = _synthetic(**mlp)
    (scaffold,) = _synthetic(**mlp, algorithm="scaffold")
    # EFL: r_k, u_k, v_k and ŵ_k (broadcast "participants")
    (efl,) = _synthetic(**mlp, algorithm="efl", schemes=["C"])
    small = 8 * 10 * 10 + 10 * 10 * 248  # the trace and the split fit: 24,800 bytes
    need = 4 * params * (1 + 10)  # 312,840 bytes
    cluster.check_memory([scaffold], need, ClusterOptions())
    cluster.check_memory([fedavg], need - 1, ClusterOptions())  # no per-device state
    with pytest.raises(ValueError) as err:
        cluster.check_memory([scaffold], need - 1, ClusterOptions())
    msg = str(err.value)
    assert "algorithm \"scaffold\" keeps 1 float32 copy of the model for every device" in msg
    assert "num_devices 10 with model \"mlp\" (7,110 parameters) make its state 0.0 GiB" in msg
    assert "allowed: num_devices <= 9 with this model and algorithm" in msg
    with pytest.raises(ValueError, match="keeps 4 float32 copies.*allowed: num_devices <= 2 "):
        cluster.check_memory([efl], need, ClusterOptions())  # 4 · 7,110 · (1 + 4·2) <= need < … (1 + 4·3)
    cluster.check_memory([scaffold], small, ClusterOptions(max_mem_mb=1))  # a cluster node of 1 MiB
    # a default-sized zoo model is counted (on torch's meta device) only where its state could exceed
    (cnn,) = _cnn()
    many = dataclasses.replace(cnn, algorithm="scaffold", num_devices=1000)
    cnn_need = 4 * cluster.MODEL_COSTS["cnn"].params * 1001  # 6.2 GiB
    cluster.check_memory([many], cnn_need, ClusterOptions())
    with pytest.raises(ValueError, match=r'num_devices 1,000 with model "cnn" \(1,663,370 parameters\)'):
        cluster.check_memory([many], cnn_need - 1, ClusterOptions())
    # a job given a GPU holds its state on the card, whose memory is not known here: not checked
    gpu = ClusterOptions(gpus=1)
    assert cluster.train_device([many], gpu) == "cuda"
    cluster.check_memory([many], cnn_need - 1, gpu)


def test_exact_params_counts_a_sized_zoo_model_without_allocating_it():
    """A zoo model whose model_params set a size is built on torch's meta device and counted (10**14
    parameters take no memory there); at its default sizes (at most 9.8 M parameters) it is not checked."""
    (cnn,) = _cnn()
    assert cluster.exact_params(cnn) is None
    assert cluster.exact_params(dataclasses.replace(cnn, model_params={"channels_last": False})) is None
    # McMahan's CNN on 1×28×28: 5×5 convolutions 1 → c1 → c2 ('same' padding, two 2×2 pools: 7×7 maps),
    # then 7·7·c2 → 512 → 10, biases included
    c1 = c2 = 10**6
    params = (25 * 1 + 1) * c1 + (25 * c1 + 1) * c2 + (49 * c2 + 1) * 512 + (512 + 1) * 10
    wide = dataclasses.replace(cnn, model_params={"channels": [c1, c2]})
    assert cluster.exact_params(wide) == params == 25_025_115_005_642
    assert cluster.exact_params(dataclasses.replace(cnn, model_params={"channels": [32, 64]})) == \
        cluster.MODEL_COSTS["cnn"].params
    with pytest.raises(ValueError, match=r'model "cnn" with model_params \{"channels": \[1000000, '
                                         r'1000000\]\} has 25,025,115,005,642 parameters'):
        cluster.check_memory([wide], 2**30, ClusterOptions())
    # vgg11's channel multiplier sizes it too: width 1 is its default count, 2 about four times that
    vgg = dataclasses.replace(cnn, model="vgg11", dataset="cifar10")
    assert cluster.exact_params(dataclasses.replace(vgg, model_params={"width": 1.0})) == \
        cluster.MODEL_COSTS["vgg11"].params
    assert cluster.exact_params(dataclasses.replace(vgg, model_params={"width": 2.0})) > \
        3.9 * cluster.MODEL_COSTS["vgg11"].params
