"""Bad configuration stops before any job, naming the key, the value and what is allowed."""

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hetfl.config import ConfigError, expand_runs, load_config, validate_config

ROOT = Path(__file__).resolve().parents[1]
QUICK = yaml.safe_load((ROOT / "workflow/config/quick.yaml").read_text())
EXP = "ruan2021_table3_synthetic"


def _with(path: list[str], value):
    cfg = copy.deepcopy(QUICK)
    node = cfg["experiments"][EXP]
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return cfg


@pytest.mark.parametrize(
    ("path", "value", "key", "allowed"),
    [
        (["algorithm"], "fedsgd", f"experiments.{EXP}.algorithm", 'one of "fedavg"'),
        (["settings", "NIID", "alpha"], -0.5, f"experiments.{EXP}.settings.NIID.alpha", ">= 0"),
        (["local_epochs"], 0, f"experiments.{EXP}.local_epochs", ">= 1"),
        (["num_traces"], [1, 9], f"experiments.{EXP}.num_traces.1", "<= 8"),
        (["trace_order"], ["T_0", "T_99"], f"experiments.{EXP}.trace_order.1", '"T_hi"'),
        (["schemes"], ["A", "D"], f"experiments.{EXP}.schemes.1", 'one of "A", "B", "C"'),
        (["cells_per_job"], "each", f"experiments.{EXP}.cells_per_job", 'one of "auto", "cell", "setting"'),
    ],
)
def test_bad_value_names_key_value_and_allowed(path, value, key, allowed):
    with pytest.raises(ConfigError) as err:
        validate_config(_with(path, value))
    msg = str(err.value)
    assert f"'{key}'" in msg
    shown = value[-1] if isinstance(value, list) else value
    assert str(shown).replace("'", '"') in msg.replace("'", '"')
    assert allowed in msg


def test_a_value_where_a_mapping_belongs_says_a_mapping():
    """'allowed: a value of type object', JSON Schema's word, left a newcomer who wrote
    algorithm_params: {fedadam: 0.5} guessing (an audit)."""
    with pytest.raises(ConfigError) as err:
        validate_config(_with(["algorithm_params"], {"fedavg": 0.5}))
    assert (f"'experiments.{EXP}.algorithm_params.fedavg' has value 0.5, which is not allowed; allowed: a "
            "mapping of keys to values ({key: value, ...})") in str(err.value)


@pytest.mark.parametrize(("path", "value", "allowed"), [
    (["seeds"], [0, 0], "each item at most once (no duplicates)"),
    (["schemes"], [], "at least 1 item"),
])
def test_a_list_of_duplicates_or_of_nothing_says_what_is_allowed_in_words(path, value, allowed):
    """'allowed: uniqueItems = True' and 'minItems = 1' named JSON Schema's keywords, not what a config may
    write (an audit: a seed or algorithm given twice)."""
    with pytest.raises(ConfigError) as err:
        validate_config(_with(path, value))
    assert (f"'experiments.{EXP}.{path[-1]}' has value {json.dumps(value)}, which is not allowed; "
            f"allowed: {allowed}") in str(err.value)


def test_unknown_key_is_named():
    cfg = _with(["learning_rate"], 0.1)
    with pytest.raises(ConfigError, match=rf"'experiments.{EXP}.learning_rate' is not allowed.*eta0"):
        validate_config(cfg)


MLP_EXP = "ma2022_efl_table2_mnist5k"  # quick.yaml's MLP (model mlp, model_params {hidden: [64]})


def _refused(cfg: dict, message: str) -> None:
    """validate_config refuses cfg with a ConfigError that says `message`."""
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    assert message in str(err.value)


@pytest.mark.parametrize(("model", "params", "message"), [
    ("mlp", {"hidden": [64], "widths": [8]},
     "'experiments.{e}.model_params.widths' has value [8], which is not a parameter of model \"mlp\"; "
     "allowed: hidden"),
    ("mlp", {"conv": "unfold"}, "'experiments.{e}.model_params.conv' has value \"unfold\", which is not a "
                                "parameter of model \"mlp\""),
    ("cnn", {"conv": "fft"}, "'experiments.{e}.model_params.conv' has value \"fft\", which is not allowed; "
                             "allowed: \"auto\", \"grouped\", \"unfold\""),
    ("char_lstm", {"cell": "cudnn"}, "'experiments.{e}.model_params.cell' has value \"cudnn\", which is not "
                                     "allowed; allowed: \"fused\", \"ops\""),
    ("cnn", {"cell": "fused"}, "'experiments.{e}.model_params.cell' has value \"fused\", which is not a "
                               "parameter of model \"cnn\""),
    ("cnn", {"channels_last": "no"},
     "'experiments.{e}.model_params.channels_last' has value \"no\", which is not allowed; allowed: true, "
     "false, \"auto\""),
    ("resnet20", {"norm": "layer"}, "'experiments.{e}.model_params.norm' has value \"layer\", which is not "
                                    "allowed for model \"resnet20\"; allowed: \"group\", \"batch\""),
    ("resnet_emnist", {"norm": None}, "'experiments.{e}.model_params.norm' has value null, which is not "
                                      "allowed for model \"resnet_emnist\"; allowed: \"group\", \"batch\""),
    ("vgg11", {"norm": "batch"}, "'experiments.{e}.model_params.norm' has value \"batch\", which is not "
                                 "allowed for model \"vgg11\"; allowed: null, \"group\""),
    ("cnn", {"norm": "batch"}, "'experiments.{e}.model_params.norm' has value \"batch\", which is not a "
                               "parameter of model \"cnn\""),
])
def test_bad_model_params_are_named_before_any_job(model, params, message):
    cfg = copy.deepcopy(QUICK)
    exp = cfg["experiments"][MLP_EXP]
    exp["model"], exp["model_params"] = model, params
    exp["dataset"] = _SOURCE_OF.get(model, exp["dataset"])
    _refused(cfg, message.format(e=MLP_EXP))


#: a source each of these models can train on (vgg11's five poolings need 32x32 images)
_SOURCE_OF = {"char_lstm": "shakespeare", "vgg11": "cifar10"}


@pytest.mark.parametrize(("partition", "sizes", "message"), [
    ({"label_skew": "dirichlet", "equal_counts": True}, {"distribution": "equal"},
     "'experiments.{e}.settings.NIID.partition.equal_counts' has value true, which is not allowed with "
     "label_skew \"dirichlet\"; allowed: true only with label_skew \"iid\" or \"pathological\" or "
     "\"natural\""),
    ({"label_skew": "pathological", "m": 2, "equal_counts": True}, {"distribution": "pareto"},
     "'experiments.{e}.settings.NIID.partition.equal_counts' has value true, which is not allowed with "
     "experiments.{e}.sizes.distribution \"pareto\" (a size skew); allowed: true only with "
     "sizes.distribution \"equal\""),
    ({"label_skew": "pathological", "m": 2, "equal_counts": "yes"}, {"distribution": "equal"},
     "equal_counts"),
])
def test_equal_counts_outside_its_skews_is_refused_before_any_job(partition, sizes, message):
    """The split job would refuse these (PartitionSpec); validation names the key first."""
    cfg = copy.deepcopy(QUICK)
    exp = cfg["experiments"][MLP_EXP]
    exp["settings"]["NIID"]["partition"], exp["sizes"] = partition, sizes
    _refused(cfg, message.format(e=MLP_EXP))


def test_equal_counts_passes_validation_and_reaches_the_split_spec():
    cfg = copy.deepcopy(QUICK)
    cfg["experiments"] = {MLP_EXP: cfg["experiments"][MLP_EXP]}
    cfg["experiments"][MLP_EXP]["settings"]["NIID"]["partition"]["equal_counts"] = True
    runs = [r for r in expand_runs(validate_config(cfg)) if r.setting == "NIID"]
    assert runs and all(r.split_spec()["partition"]["equal_counts"] is True for r in runs)


@pytest.mark.parametrize(("model", "params", "message"), [
    ("mlp", {"hidden": [-3]}, "'experiments.{e}.model_params.hidden' has value [-3], which is not allowed; "
                              "allowed: a whole number >= 1, or a non-empty list of them"),
    ("mlp", {"hidden": []}, "'experiments.{e}.model_params.hidden' has value []"),
    ("vgg11", {"width": 0}, "'experiments.{e}.model_params.width' has value 0, which is not allowed; "
                            "allowed: a number > 0"),
    ("resnet20", {"widths": [16, 32.5, 64]},
     "'experiments.{e}.model_params.widths' has value [16, 32.5, 64]"),
    # the form each model's constructor takes (config.SIZE_FORMS; stop 50: each failed in training)
    ("mlp", {"hidden": 200}, "'experiments.{e}.model_params.hidden' has value 200, which model \"mlp\" does "
                             "not take; allowed: a non-empty list of whole numbers >= 1"),
    ("vgg11", {"hidden": [512]}, "'experiments.{e}.model_params.hidden' has value [512], which model "
                                 "\"vgg11\" does not take; allowed: a whole number >= 1, not a list"),
    ("char_lstm", {"hidden": [256, 256]}, "'experiments.{e}.model_params.hidden' has value [256, 256], which "
                                          "model \"char_lstm\" does not take"),
    ("resnet20", {"blocks": [3]}, "'experiments.{e}.model_params.blocks' has value [3], which model "
                                  "\"resnet20\" does not take"),
    ("cnn", {"channels": [32]}, "'experiments.{e}.model_params.channels' has value [32], which model \"cnn\" "
                                "does not take; allowed: a list of exactly 2 whole numbers >= 1"),
    ("cnn", {"channels": [32, 64, 128]}, "'experiments.{e}.model_params.channels' has value [32, 64, 128]"),
    ("resnet20", {"groups": 3}, "'experiments.{e}.model_params.groups' has value 3, which is not allowed "
                                "with GroupNorm's 3 groups and widths [16, 32, 64]; allowed: every width a "
                                "multiple of groups (or norm \"batch\")"),
    ("resnet_emnist", {"widths": [6, 12], "groups": 4}, "'experiments.{e}.model_params.widths' has value "
                                                         "[6, 12], which is not allowed with GroupNorm's 4"),
    # a stage narrower than the one before: the option-A shortcut failed in training (a fuzz, stop 50)
    ("resnet20", {"widths": [16, 8], "norm": "batch"},
     "'experiments.{e}.model_params.widths' has value [16, 8], which is not allowed; allowed: widths that "
     "never decrease"),
    ("vgg11", {"cfg": [64, "X"]}, "'experiments.{e}.model_params.cfg' has value [64, \"X\"], which is not "
                                  "allowed; allowed: a list of convolutions' widths (whole numbers >= 1), "
                                  "each optionally followed by \"M\" (a 2x2 max-pooling)"),
    # a pooling not right after a convolution: the batched model and its torch twin disagreed, and the
    # training job failed on "vgg11: batched parameters [...]" (a fuzz of model_params, stop 50)
    ("vgg11", {"cfg": ["M", 64]}, "'experiments.{e}.model_params.cfg' has value [\"M\", 64]"),
    ("vgg11", {"cfg": [64, "M", "M", 128]}, "'experiments.{e}.model_params.cfg' has value [64, \"M\", \"M\""),
    # vgg11's five poolings on mnist5k's 28x28 images: the model refused them in the training job
    ("vgg11", {}, "'experiments.{e}.model' has value \"vgg11\", which is not allowed for dataset \"mnist5k\" "
                  "(1x28x28 images): its 5 2x2 max-poolings need images of at least 32x32; allowed: a source "
                  "of larger images, or model_params.cfg with at most 4 \"M\""),
])
def test_model_sizes_that_training_would_refuse_are_refused_first(model, params, message):
    """hidden: [-3] passed validation, then training failed on a negative tensor dimension (an audit)."""
    cfg = copy.deepcopy(QUICK)
    exp = cfg["experiments"][MLP_EXP]
    exp["model"], exp["model_params"] = model, params
    if model == "char_lstm" or params:  # vgg11 without params: on mnist5k's images, the case it tests
        exp["dataset"] = _SOURCE_OF.get(model, exp["dataset"])
    _refused(cfg, message.format(e=MLP_EXP))


def test_vgg11_with_poolings_its_images_hold_passes():
    """The refusal above counts the cfg's poolings: four fit 28x28 images (28 → 14 → 7 → 3 → 1)."""
    cfg = copy.deepcopy(QUICK)
    exp = cfg["experiments"][MLP_EXP]
    exp["model"], exp["model_params"] = "vgg11", {"cfg": [8, "M", 8, "M", 8, "M", 8, "M"]}
    assert exp["dataset"] == "mnist5k"
    validate_config(cfg)
    for cfg_value in (5, "M"):  # not a list: the cfg's own refusal, not a crash counting its poolings
        exp["model_params"] = {"cfg": cfg_value}
        _refused(cfg, f"'experiments.{MLP_EXP}.model_params.cfg' has value {json.dumps(cfg_value)}")
    import inspect

    from hetfl.config import RESNET_GROUPS, RESNET_WIDTHS, VGG11_POOLINGS
    from hetfl.models.zoo import VGG11_CFG, CifarResNet, ResNetEMNIST

    assert VGG11_POOLINGS == VGG11_CFG.count("M")
    defaults = {k: p.default for k, p in inspect.signature(CifarResNet.__init__).parameters.items()}
    assert RESNET_WIDTHS == {"resnet20": defaults["widths"], "resnet_emnist": ResNetEMNIST.defaults["widths"]}
    assert RESNET_GROUPS == defaults["groups"] and "groups" not in ResNetEMNIST.defaults


@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors")  # the side below a model's least
def test_min_image_sides_are_the_models_own():
    """config.MIN_IMAGE_SIDE (and vgg11's 2**poolings): each model trains a step at that side and fails one
    below; cnn_cifar on Digits' 8x8 images had passed validation and failed in the training job."""
    import torch

    from hetfl.config import MIN_IMAGE_SIDE, VGG11_POOLINGS
    from hetfl.models import make_model

    def trains(model, side):
        try:  # too small fails in building (vgg11), initialising (an empty layer) or the step
            net = make_model(model, (3, side, side), 10)
            stack = [p.unsqueeze(0).repeat(2, *[1] * p.dim()) for p in net.init_params(torch.Generator())]
            net.sgd_step(stack, torch.zeros(2, 2, 3, side, side), torch.zeros(2, 2, dtype=torch.int64), 0.1)
        except (RuntimeError, ValueError, ZeroDivisionError):
            return False
        return True

    for model, side in {**MIN_IMAGE_SIDE, "vgg11": 2**VGG11_POOLINGS}.items():
        assert trains(model, side) and not trains(model, side - 1), model
    assert trains("resnet20", 1) and trains("resnet_emnist", 1)  # global pooling: any side
    cfg = copy.deepcopy(QUICK)
    exp = cfg["experiments"][MLP_EXP]
    exp["model"], exp["dataset"] = "cnn_cifar", "digits"
    _refused(cfg, f"'experiments.{MLP_EXP}.model' has value \"cnn_cifar\", which is not allowed for dataset "
                  "\"digits\" (1x8x8 images): its convolutions and poolings need images of at least 16x16; "
                  "allowed: a source of larger images")


def test_size_forms_are_the_models_own():
    """config.SIZE_FORMS (validation imports no torch) = what each model builds from: every model takes its
    size parameters in their form, and refuses the others (or, the CNNs' three channels, drops one)."""
    import torch

    from hetfl.config import MODEL_PARAMS, SIZE_FORMS, SIZE_PARAMS
    from hetfl.models import make_model

    shapes = {"mlp": 784, "cnn": (1, 28, 28), "cnn_bn": (1, 28, 28), "cnn_cifar": (3, 32, 32),
              "vgg11": (3, 32, 32), "resnet20": (3, 32, 32), "resnet_emnist": (1, 28, 28), "char_lstm": 80,
              "sent_lstm": 25}

    def count(model, **kw):
        if model == "vgg11" and "groups" in kw:  # read only by its GroupNorm
            kw["norm"] = "group"
        with torch.device("meta"):  # shapes only
            net = make_model(model, shapes[model], 10, **kw)
            return sum(p.numel() for p in net.init_params(torch.Generator()))

    assert {m for m, taken in MODEL_PARAMS.items() if SIZE_PARAMS.intersection(taken)} == set(SIZE_FORMS)
    for model, forms in SIZE_FORMS.items():
        assert set(forms) == SIZE_PARAMS.intersection(MODEL_PARAMS[model]), model
        for key, form in forms.items():
            given = 4 if form == "int" else (4, 4) if form == "list" else (4,) * int(form)
            assert count(model, **{key: given}) > 0, (model, key)
            for other in (4, (4,), (4, 4), (4, 4, 4)):
                if other == given or (form == "list" and other != 4):
                    continue
                try:
                    n = count(model, **{key: other})
                except (TypeError, IndexError, ValueError):
                    continue
                assert isinstance(form, int) and n == count(model, **{key: other[:form]}), (model, key, other)


def test_an_event_the_table_cannot_use_or_that_empties_the_objective_is_refused():
    cfg = copy.deepcopy(QUICK)
    table3 = cfg["experiments"][EXP]
    table3["event"] = {"kind": "arrival", "rounds": [10], "policies": ["fast_reboot"]}
    with pytest.raises(ConfigError, match=rf"'experiments.{EXP}.event' is not allowed with table "
                                          r"accuracy_difference"):
        validate_config(cfg)
    cfg = copy.deepcopy(QUICK)
    t5 = next(n for n, e in cfg["experiments"].items() if e["table"] == "crossing_epochs")
    cfg["experiments"][t5]["event"]["devices"] = list(range(cfg["experiments"][t5]["num_devices"]))
    with pytest.raises(ConfigError, match=rf"'experiments.{t5}.event.devices' has value \[0, 1, .*every "
                                          r"device would arrive or depart"):
        validate_config(cfg)


def test_a_stagger_that_moves_the_last_arrival_past_the_rounds_is_named():
    """An arrival at round 3 of 6 with devices [3, 4, 5] and stagger 2 (the last at round 7) was refused as
    "event.rounds has value 3, ...; allowed: events within the run's 6 rounds": a key and a value that were
    within the rounds, not the stagger (an audit)."""
    tiny = yaml.safe_load((ROOT / "workflow/config/tiny.yaml").read_text())
    exp = tiny["experiments"]["tiny_table4"]
    exp["event"].update(devices=[3, 4, 5], stagger=2)
    _refused({"experiments": {"tiny_table4": exp}},
             "config key 'experiments.tiny_table4.event.stagger' has value 2, which is not allowed with "
             "event.rounds 3 and 3 devices (the last would come at round 7); allowed: at most 1 (events "
             "within the run's 6 rounds)")
    exp["event"]["stagger"] = 1
    validate_config({"experiments": {"tiny_table4": exp}})


@pytest.mark.parametrize(("config", "name", "why"), [
    ("tiny.yaml", "tiny_table4", "it counts the global epochs after each event one by one"),
    ("tiny.yaml", "tiny_table5", "it counts the global epochs after each event one by one"),
    ("paper/ruan2021_figure5.yaml", "ruan2021_figure5_mnist", "it counts the global epochs after each event"),
    ("quick.yaml", "ma2022_efl_table2_mnist5k", "its best accuracy is the best over every round"),
    ("quick.yaml", "ma2022_efl_figure2_mnist5k_lam0", "its best accuracy is the best over every round"),
    ("quick.yaml", "fedfor_table2_mnist5k",
     "its best accuracy is the best over every round, as the paper's is, and ACC_x is the first round that "
     "reaches x %"),
    ("paper/tian2022_fedfor_table5.yaml", "tian2022_fedfor_table5", "its best accuracy per stretch and its "
                                                                     "mean over rounds read every round"),
])
def test_a_table_that_reads_every_round_refuses_rounds_not_evaluated(config, name, why):
    """Tables 4-5 and Figure 5 count rounds after an event one by one: with eval_every 1000000000 the runs
    trained and the table job failed ("the curve has no value at round τ0 − 1 = 2"), and an eval_every that
    evaluates τ0 − 1 would have counted only evaluated rounds, silently (an extreme-value probe). BMTA, EFL's
    λ table and FedFOR's take the best over rounds, which every fifth round would have lowered, silently."""
    exp = yaml.safe_load((ROOT / "workflow/config" / config).read_text())["experiments"][name]
    validate_config({"experiments": {name: exp}})
    for every in (2, 1000000000):
        exp["eval_every"] = every
        _refused({"experiments": {name: exp}},
                 f"config key 'experiments.{name}.eval_every' has value {every}, which is not allowed with "
                 f"table {exp['table']} ({why}")
        _refused({"experiments": {name: exp}}, "so every round must be evaluated); allowed: 1")


def test_an_event_without_a_table_and_a_final_round_table_take_any_eval_every():
    """Only the tables that read every round refuse eval_every > 1: an event run without a table, and Table
    3 (the final round, always evaluated), take it."""
    tiny = yaml.safe_load((ROOT / "workflow/config/tiny.yaml").read_text())["experiments"]
    event = dict(tiny["tiny_table4"], table="none", eval_every=3)
    event.pop("readings")
    validate_config({"experiments": {"tiny_table4": event}})
    validate_config({"experiments": {"tiny_table3": dict(tiny["tiny_table3"], eval_every=3)}})


@pytest.mark.parametrize(("exp", "change", "message"), [
    (EXP, {"algorithm": None, "algorithms": ["fedavg", "fedprox"]},
     "'experiments.{e}.algorithms' has value [\"fedavg\", \"fedprox\"], which is not allowed with table "
     "accuracy_difference (its cells pair runs by seed and setting, with no method column"),
    ("objective_inconsistency", {"algorithms": ["fedavg", "fedprox"]},
     "'experiments.{e}.algorithms' has value [\"fedavg\", \"fedprox\"], which is not allowed with table "
     "objective_inconsistency; allowed: those with closed forms, fedavg, fednova, scaffold"),
])
def test_algorithms_a_table_cannot_tell_apart_or_has_no_closed_form_for_are_refused(exp, change, message):
    """Table 3 trained both algorithms' runs and then failed; Tables 4-5 and Figure 3 merged them silently
    (keyed by seed); objective_inconsistency refused an algorithm without a closed form after training (an
    audit adding an algorithm to the grids)."""
    cfg = copy.deepcopy(QUICK)
    merged = {**cfg["experiments"][exp], **change}
    cfg["experiments"] = {exp: {k: v for k, v in merged.items() if v is not None}}
    _refused(cfg, message.format(e=exp))


@pytest.mark.parametrize(("table", "first", "second", "key", "shown"), [
    ("tiny_table3", {}, {"algorithm": "fedavgm"}, "algorithm", "fedavg"),  # Table 3 failed after training
    ("tiny_table4", {}, {"algorithms": ["fedprox"]}, "algorithms", "fedavg"),  # Table 4 merged them silently
    ("tiny_table5", {"algorithm": "fedprox"}, {"algorithm": "fedprox", "algorithm_params": {"fedprox": {
        "mu": 0.5}}}, "algorithm_params.fedprox", 'fedprox {"mu": 0.01, "prox_step": "gradient"}'),
    ("tiny_table5", {}, {"settings": {"a0": {"alpha": 0.0, "beta": 0.0}}}, None, None),  # one algorithm
])
def test_another_algorithms_experiment_on_a_table_without_a_method_column_is_refused(table, first, second,
                                                                                     key, shown):
    """Validation refused a second algorithm within an experiment of a Ruan table and said "allowed: one
    algorithm (an experiment each)"; an experiment each (a researcher's own algorithm beside tiny.yaml's
    FedAvg, an audit) then passed, trained, and Table 3 failed on "several runs for the same ..." while
    Tables 4 and 5 paired the two algorithms' runs by seed silently. Every experiment of such a table now
    runs one algorithm with one set of hyperparameters."""
    tiny = yaml.safe_load((ROOT / "workflow/config/tiny.yaml").read_text())
    base = {**tiny["experiments"][table], **first}
    cfg = {"experiments": {table: base, f"{table}_other": {**copy.deepcopy(base), **second}}}
    if key is None:
        validate_config(cfg)
        return
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    text = str(err.value)
    assert f"config key 'experiments.{table}_other.{key}'" in text, text
    assert f"not allowed with table {base['table']} beside experiment {table} ({shown})" in text, text
    assert "no method column" in text and "a directory of its own" in text, text


@pytest.mark.parametrize(("table", "change", "message"), [
    ("objective_inconsistency", {}, "'experiments.{e}.dataset' has value \"synthetic\", which is not allowed "
                                    "with table objective_inconsistency"),
    # eval_every 1: Table 3's 5 is refused with efl_lambda on its own (EVERY_ROUND_TABLES)
    ("efl_lambda", {"eval_every": 1},
     "'experiments.{e}.algorithm' has value \"fedavg\", which is not allowed with table efl_lambda (it reads "
     "EFL's λ); allowed: efl among the algorithms"),
])
def test_a_table_its_runs_cannot_feed_is_refused_before_any_job(table, change, message):
    """Both trained every run, then the table failed (needs dataset quadratic; KeyError on EFL's λ)."""
    cfg = copy.deepcopy(QUICK)
    cfg["experiments"] = {EXP: {**cfg["experiments"][EXP], "table": table, **change}}
    cfg["experiments"][EXP].pop("readings", None)
    cfg["experiments"][EXP].pop("readings_grid", None)
    _refused(cfg, message.format(e=EXP))


@pytest.mark.parametrize(("change", "message"), [
    ({"settings": {"NIID": {"partition": {"label_skew": "pathological", "m": 20}}}},
     "'experiments.{e}.settings.NIID.partition.m' has value 20, which is not allowed with dataset mnist5k; "
     "allowed: 1..10 (its classes)"),
    ({"num_devices": 5000}, "'experiments.{e}.num_devices' has value 5000, which is not allowed with dataset "
                            "mnist5k; allowed: at most 4,000 (its training samples)"),
    # these two passed, then the split job refused them (shards exceed the samples; min_size x devices)
    ({"settings": {"NIID": {"partition": {"label_skew": "shards", "shards_per_client": 250}}}},
     "'experiments.{e}.settings.NIID.partition.shards_per_client' has value 250, which is not allowed with "
     "dataset mnist5k and num_devices 20; allowed: at most 200 (4,000 training samples over 20 devices)"),
    ({"settings": {"NIID": {"partition": {"label_skew": "dirichlet", "min_size": 300}}}},
     "'experiments.{e}.settings.NIID.partition.min_size' has value 300, which is not allowed with dataset "
     "mnist5k and num_devices 20; allowed: at most 200 (4,000 training samples over 20 devices)"),
    # cyclic classes that miss some: the split job refused it (an experiment fuzz, stop 50)
    ({"num_devices": 2}, "'experiments.{e}.settings.NIID.partition.m' has value 2, which is not allowed with "
                         "num_devices 2 on dataset mnist5k (10 classes): cyclic classes reach every class "
                         "only when num_devices x m >= 10, and the split would lose the samples of the "
                         "others; allowed: m >= 5, more devices, or label_choice \"random\""),
])
def test_what_a_sources_size_refuses_is_refused_before_any_job(change, message):
    """The split job refused these after the traces were made (two audits); mnist5k has 10 classes, 4,000
    training samples."""
    cfg = copy.deepcopy(QUICK)
    cfg["experiments"] = {MLP_EXP: {**cfg["experiments"][MLP_EXP], **change}}
    _refused(cfg, message.format(e=MLP_EXP))


def test_cyclic_classes_that_reach_every_class_or_random_ones_pass():
    """num_devices x m = 10 reaches mnist5k's 10 classes; label_choice random drops the undrawn ones."""
    cfg = copy.deepcopy(QUICK)
    exp = {**cfg["experiments"][MLP_EXP], "num_devices": 5}
    cfg["experiments"] = {MLP_EXP: exp}
    assert exp["settings"]["NIID"]["partition"] == {"label_skew": "pathological", "m": 2}
    validate_config(cfg)
    exp["num_devices"] = 2
    exp["settings"]["NIID"]["partition"]["label_choice"] = "random"
    validate_config(cfg)


@pytest.mark.parametrize(("exp", "setting", "key", "value", "shown", "allowed"), [
    (MLP_EXP, "NIID", "alpha", 0.3, "0.3", "partition, local_epochs"),  # meant as the Dirichlet's
    (MLP_EXP, "NIID", "iid", True, "true", "partition, local_epochs"),
    (MLP_EXP, "NIID", "iid", False, "false", "partition, local_epochs"),  # the schema's default, written
    (EXP, "NIID", "partition", {"label_skew": "iid"}, "{...}", "alpha, beta, iid, local_epochs"),
    (EXP, "NIID", "a", [1.0, 2.0], "[1.0, 2.0]", "alpha, beta, iid, local_epochs"),
    ("objective_inconsistency", "t2_10_p_equal", "alpha", 1.0, "1.0", "a, b, n, local_epochs"),
])
def test_a_setting_key_the_dataset_does_not_read_is_refused(exp, setting, key, value, shown, allowed):
    """settings {NIID: {alpha: 0.3, partition: {label_skew: dirichlet}}} on mnist5k passed: the split used
    the partition's alpha 0.5 and every run recorded alpha 0.3; SYNTHETIC's iid, a partition on SYNTHETIC and
    the quadratic bed's a elsewhere were ignored as silently (an audit)."""
    cfg = copy.deepcopy(QUICK)
    cfg["experiments"] = {exp: cfg["experiments"][exp]}
    cfg["experiments"][exp]["settings"][setting][key] = value
    _refused(cfg, f"config key 'experiments.{exp}.settings.{setting}.{key}' has value {shown}, which is not "
                  f"allowed with dataset \"{cfg['experiments'][exp]['dataset']}\" (it does not read it")
    _refused(cfg, f"; allowed: {allowed}")


def test_conv_options_pass_validation():
    cfg = copy.deepcopy(QUICK)
    exp = cfg["experiments"][MLP_EXP]
    exp["model"], exp["model_params"] = "cnn", {"conv": "unfold", "channels_last": False, "hidden": [16]}
    assert validate_config(cfg)["experiments"][MLP_EXP]["model_params"]["conv"] == "unfold"
    exp["model_params"] = {"channels_last": "auto"}  # the default, by device (models.layers.channels_last_on)
    assert validate_config(cfg)["experiments"][MLP_EXP]["model_params"]["channels_last"] == "auto"



def test_norm_options_pass_validation():
    """The ResNets' norm (FedFOR Table 2 sets "batch") and VGG-11's, each value its model takes."""
    cfg = copy.deepcopy(QUICK)
    exp = cfg["experiments"][MLP_EXP]
    for model, norm in (("resnet20", "batch"), ("resnet20", "group"), ("resnet_emnist", "batch"),
                        ("vgg11", None), ("vgg11", "group")):
        exp["model"], exp["model_params"] = model, {"norm": norm}
        exp["dataset"] = _SOURCE_OF.get(model, "mnist5k")
        assert validate_config(cfg)["experiments"][MLP_EXP]["model_params"]["norm"] == norm



def test_fedfor_table2_runs_he_et_als_batch_norm_resnet20():
    """FedFOR App. D: "the proper ResNet implementation for CIFAR10 (He et al. 2016)", batch norm
    after every convolution: every Table 2 run is resnet20 with norm batch (GroupNorm is the default)."""
    runs = list(expand_runs(load_config(ROOT / "workflow/config/paper/tian2022_fedfor_table2.yaml")))
    assert runs and {(r.model, tuple(r.model_params.items())) for r in runs} == \
        {("resnet20", (("norm", "batch"),))}


def test_model_params_lists_match_the_models():
    """config.MODEL_PARAMS (config validation imports no torch) = the models' constructor arguments."""
    import inspect

    from hetfl.config import CONV_IMPLS, LSTM_CELLS, MODEL_PARAMS, NORMS
    from hetfl.models import MODELS
    from hetfl.models.blocks import NORMS as BLOCK_NORMS
    from hetfl.models.layers import CONV_IMPLS as LAYER_CONV_IMPLS
    from hetfl.models.recurrent import LSTM_CELLS as LAYER_LSTM_CELLS
    from hetfl.models.zoo import CifarResNet

    assert set(MODEL_PARAMS) == set(MODELS) | {"quadratic"} and CONV_IMPLS == LAYER_CONV_IMPLS
    assert LSTM_CELLS == LAYER_LSTM_CELLS and NORMS["resnet20"] == NORMS["resnet_emnist"] == BLOCK_NORMS
    assert {name for name, taken in MODEL_PARAMS.items() if "norm" in taken} == set(NORMS)
    for name, cls in MODELS.items():
        taken = [p for p in inspect.signature(cls.__init__).parameters
                 if p not in ("self", "input_dim", "num_classes", "kwargs")]
        if name in ("resnet20", "resnet_emnist"):  # **kwargs: the twin's, plus the batched model's own two
            taken = [p for p in inspect.signature(CifarResNet.__init__).parameters
                     if p not in ("self", "shape", "num_classes")] + ["channels_last", "conv"]
        assert list(MODEL_PARAMS[name]) == taken, name


@pytest.mark.parametrize(("path", "value", "shown", "allowed"), [
    (["rounds"], 4.0, "4.0", "a whole number written without a decimal point"),
    (["seeds"], [0.0, 1], "0.0", "a whole number"),
    (["num_traces"], [1.0, 6], "1.0", "a whole number"),
    (["eta0"], float("nan"), "NaN", "a finite number"),
    (["test_fraction"], float("inf"), "Infinity", "a finite number"),
    (["settings", "NIID", "alpha"], float("nan"), "NaN", "a finite number"),
])
def test_float_integers_and_non_finite_numbers_are_refused(path, value, shown, allowed):
    """jsonschema's integer takes 4.0 (then `hetfl trace --rounds 4.0` failed mid-workflow, seeds made
    paths seed0.0) and its number takes NaN and ∞ (eta0 NaN trained 12 runs into an empty table)."""
    with pytest.raises(ConfigError) as err:
        validate_config(_with(path, value))
    key = ".".join(["experiments", EXP, *path]) + (".0" if isinstance(value, list) else "")
    assert f"config key '{key}' has value {shown}, which is not allowed; allowed: {allowed}" in str(err.value)


def test_a_seed_torch_cannot_take_is_refused():
    """seeds: [18446744073709551616] (2**64) passed, its split and trace jobs ran, then every training job
    failed on torch's "Overflow when unpacking long long", naming no key (an audit)."""
    with pytest.raises(ConfigError) as err:
        validate_config(_with(["seeds"], [2**64, 1]))
    assert (f"config key 'experiments.{EXP}.seeds.0' has value {2**64}, which is not allowed; allowed: "
            f"<= {2**64 - 1}") in str(err.value)
    validate_config(_with(["seeds"], [2**64 - 1]))


@pytest.mark.parametrize(("value", "shown"), [(4.5, "4.5"), ("all", '"all"'), (float("nan"), "NaN")])
def test_a_key_of_two_types_names_both_in_words(value, shown):
    """global_test_samples ([integer, "null"]) given 4.5, "all" or .nan escaped as a TypeError traceback
    (unhashable type: 'list') instead of the message (an audit)."""
    with pytest.raises(ConfigError) as err:
        validate_config(_with(["global_test_samples"], value))
    assert (f"config key 'experiments.{EXP}.global_test_samples' has value {shown}, which is not allowed; "
            "allowed: a whole number written without a decimal point (4, not 4.0) or null") in str(err.value)


@pytest.mark.parametrize(("names", "message"), [
    (["..", EXP], "config key 'experiments' has value \"..\", which is not allowed; allowed: a string "
                  "matching ^[A-Za-z0-9_][A-Za-z0-9_.-]*$"),  # results/.. is the workflow's root
    (["-x", EXP], "config key 'experiments' has value \"-x\", which is not allowed"),
    (["mlflow.db"], "'experiments.mlflow.db' is not allowed: the name is taken by hetfl's own files"),
    (["traces"], "'experiments.traces' is not allowed: the name is taken"),
    (["exp.a", "exp_a"], "'experiments.exp_a' is not allowed beside 'experiments.exp.a': both make the "
                         "Snakemake rule train_exp_a"),
])
def test_experiment_names_that_escape_or_collide_are_refused(names, message):
    exp = QUICK["experiments"][EXP]
    cfg = {"experiments": {name: copy.deepcopy(exp) for name in names}}
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    assert message in str(err.value)


@pytest.mark.parametrize(("name", "shown"), [("5", "5"), ("yes", "true"), ("null", "null"), ("0.50", "0.5")])
def test_names_yaml_reads_as_no_string_are_refused(name, shown, tmp_path):
    """An experiment named `5:` or `yes:` escaped as a TypeError traceback (re.sub on an int); a setting so
    named passed and ran as the setting True, None or 0.5 (run names True_T1_A_s0): the schema's name
    pattern ignores what is not a string (an audit)."""
    tiny = (ROOT / "workflow/config/tiny.yaml").read_text()
    for text, key in [(tiny.replace("  tiny_table3:", f"  {name}:"), "experiments"),
                      (tiny.replace("      NIID: {alpha: 1.0, beta: 1.0}\n    num_devices: 8",
                                    f"      {name}: {{alpha: 1.0, beta: 1.0}}\n    num_devices: 8"),
                       "experiments.tiny_table3.settings")]:
        assert text != tiny
        path = tmp_path / "config.yaml"
        path.write_text(text)
        with pytest.raises(ConfigError) as err:
            load_config(path)
        assert (f"config key '{key}' has value {shown}, which is not allowed; allowed: a string (in quotes "
                "where YAML would read a number") in str(err.value)


def test_names_longer_than_a_file_name_holds_are_refused_before_any_job(tmp_path):
    """A setting named with 250 characters validated; its run (258 bytes with _T1_A_s0) trained, then its
    results directory failed with "File name too long", and the training was lost. An experiment's name
    of 300 bytes validated too. Both are refused now, naming the key and the bound; the longest allowed
    names validate."""
    tiny = (ROOT / "workflow/config/tiny.yaml").read_text()
    for name, setting, message in [
            ("x" * 243, "NIID", f"config key 'experiments.{'x' * 40}…' has a name of 243 bytes, which is not "
                                "allowed; allowed: at most 242 bytes (a file name holds 255, and the "
                                "experiment's split figure is <name>.caption.html)"),
            ("tiny_table3", "N" * 244, f"config key 'experiments.tiny_table3.settings.{'N' * 40}…' names "
                                       f"run {'N' * 40}… of 252 bytes, which is not allowed; allowed: run "
                                       "names of at most 251 bytes (a file name holds 255, and the run's log "
                                       "is <run>.log): a shorter setting name")]:
        text = tiny.replace("    readings: {completion: [floor]}\n    readings_grid: {num_traces: [6]}\n", "")
        assert "completion" not in text.split("tiny_table4")[0]  # its runs are <setting>_T<n>_<scheme>_s<s>
        text = text.replace("  tiny_table3:", f"  {name}:").replace(
            "      NIID: {alpha: 1.0, beta: 1.0}\n    num_devices: 8",
            f"      {setting}: {{alpha: 1.0, beta: 1.0}}\n    num_devices: 8")
        (tmp_path / "config.yaml").write_text(text)
        with pytest.raises(ConfigError) as err:
            load_config(tmp_path / "config.yaml")
        assert message in str(err.value), str(err.value)
        # one byte shorter fits: the run name's suffix is _T1_A_s0 (8 bytes), the longest of this experiment
        fits = text.replace(f"  {name}:", f"  {name[:242]}:").replace(f"      {setting}:",
                                                                      f"      {setting[:243]}:")
        (tmp_path / "config.yaml").write_text(fits)
        load_config(tmp_path / "config.yaml")


def test_num_traces_longer_than_trace_order():
    cfg = _with(["trace_order"], ["T_0", "T_30"])
    with pytest.raises(ConfigError, match=r"num_traces' has value 3.*allowed: 1..2"):
        validate_config(cfg)


@pytest.mark.parametrize(("path", "value", "message"), [
    (["p_inactive"], 0.2, rf"'experiments.{EXP}.p_inactive' has value 0.2, which is not allowed with trace "
                          r"T_hi \(the zeros alone give a std above the target 0.2330; allowed: p_inactive "
                          r"< 0.0739\)"),
    (["readings"], {"p_inactive": [0.02, 0.1]}, rf"'experiments.{EXP}.readings.p_inactive' has value 0.1, "
                                                r"which is not allowed with trace T_hi"),
    (["settings", "IID", "alpha"], 1.0, rf"'experiments.{EXP}.settings.IID' has iid: true with alpha 1.0, "
                                        r"beta 0.0, which is not allowed; allowed: alpha 0 and beta 0"),
    (["test_fraction"], 0.99, rf"'experiments.{EXP}.test_fraction' has value 0.99, which is not allowed with "
                              r"sizes as given \(a device of 20 samples would keep no training sample\)"),
])
def test_values_the_split_or_trace_jobs_would_refuse_are_refused_first(path, value, message):
    """A p_inactive that cannot keep an inactive trace's Table 2 std, and SYNTHETIC-IID with α or β, used to
    pass validation and fail in the split or trace job, mid-workflow (an audit found both)."""
    with pytest.raises(ConfigError, match=message):
        validate_config(_with(path, value))
    validate_config(_with(["p_inactive"], 0.07))  # below T_hi's bound: a fit exists


def test_a_synthetic_holdout_is_checked_against_the_floored_sizes():
    """A SYNTHETIC device keeps a training sample after its holdout of max(1, round(test_fraction·n)): equal
    sizes of 1 under the floor min_size 2 hold 2 samples (1 test, 1 train), but were refused as devices of
    1, with "allowed: ... e.g. <= -0.500 for 1"."""
    cfg = _with(["test_fraction"], 0.2)
    cfg["experiments"][EXP]["sizes"] = {"distribution": "equal", "size": 1, "min_size": 2}
    validate_config(cfg)
    cfg["experiments"][EXP].update(test_fraction=0.9,
                                   sizes={"distribution": "equal", "size": 3, "min_size": 2})
    with pytest.raises(ConfigError) as err:  # round(2.7) = 3 of 3 held out
        validate_config(cfg)
    assert str(err.value) == (f"config key 'experiments.{EXP}.test_fraction' has value 0.9, which is not "
                              "allowed with sizes as given (a device of 3 samples would keep no training "
                              "sample); allowed: a fraction that leaves one, e.g. <= 0.500 for 3")


def test_a_synthetic_holdout_suggestion_is_a_fraction_that_leaves_a_sample():
    """The suggested test_fraction was (n - 1.5) / n to 3 decimals: for devices of 10000 samples that is
    "e.g. <= 1.000", which test_fraction < 1 refuses; it is shown with the decimals it needs."""
    cfg = _with(["test_fraction"], 0.99999)
    cfg["experiments"][EXP]["sizes"] = {"distribution": "equal", "size": 10000, "max_size": 10000}
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    assert str(err.value) == (f"config key 'experiments.{EXP}.test_fraction' has value 0.99999, which is not "
                              "allowed with sizes as given (a device of 10000 samples would keep no training "
                              "sample); allowed: a fraction that leaves one, e.g. <= 0.9999 for 10000")
    cfg["experiments"][EXP]["test_fraction"] = 0.9999  # the suggestion validates
    validate_config(cfg)


@pytest.mark.parametrize(("key", "values"), [("eta0", [0.1, 0.1000001]), ("p_inactive", [0.02, 0.02000001])])
def test_readings_values_that_give_one_run_name_are_refused(key, values):
    """readings eta0 [0.1, 0.1000001] named both variants ..._s0__eta0-0.1; the training job trained both into
    that one directory, the second over the first, and reported "1 ok" (an audit)."""
    with pytest.raises(ConfigError) as err:
        validate_config(_with(["readings"], {key: values}))
    assert (f"config key 'experiments.{EXP}.readings.{key}' has value {values[1]}, which is not allowed "
            f"beside {values[0]}: both name a run ") in str(err.value)
    assert "allowed: values that differ within their first 6 significant digits" in str(err.value)


def test_readings_values_of_a_partition_key_that_give_one_run_name_name_both_values():
    """equal_counts_fraction [0.1, 0.1000001] was refused as having value "equal_counts_fraction=0.1" beside
    "equal_counts_fraction=0.1": the run name's rounded reading, twice, not the two values."""
    cfg = yaml.safe_load((ROOT / "workflow/config/checks/fedfor_fedbn_readings.yaml").read_text())
    (name, exp), = cfg["experiments"].items()
    exp["readings"] = {"equal_counts_fraction": [0.1, 0.1000001]}
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    assert (f"config key 'experiments.{name}.readings.equal_counts_fraction' has value 0.1000001, which is "
            "not allowed beside 0.1: both name a run ") in str(err.value)


def test_defaults_filled_and_grid_expanded():
    cfg = validate_config({"experiments": {"x": {
        "table": "accuracy_difference", "dataset": "synthetic", "settings": {"S": {"alpha": 1, "beta": 1}},
        "schemes": ["A", "C"], "num_traces": [2], "seeds": [0, 1]}}})
    exp = cfg["experiments"]["x"]
    assert exp["rounds"] == 200 and exp["batch_size"] == 20 and exp["sizes"]["index"] == 0.5
    runs = list(expand_runs(cfg))
    assert [r.run for r in runs] == ["S_T2_A_s0", "S_T2_A_s1", "S_T2_C_s0", "S_T2_C_s1"]
    assert runs[0].traceset == "T2"


def test_paper_config_is_the_paper_grid():
    cfg = load_config(ROOT / "workflow/config/paper/ruan2021_table3_synthetic.yaml")
    runs = list(expand_runs(cfg))
    seeds = len(cfg["experiments"][EXP]["seeds"])
    assert len(runs) == 2 * 8 * 3 * seeds
    assert {r.rounds for r in runs} == {200} and {r.num_devices for r in runs} == {50}


def _dry_run(configfile, workdir, launch=("-m", "snakemake")):
    """`snakemake -n` in a scratch directory, so outputs of earlier runs in the checkout do not count.
    launch: what the interpreter runs, given snakemake's arguments after it."""
    cmd = [sys.executable, *launch, "-n", "--cores", "1", "-s", str(ROOT / "Snakefile"),
           "--directory", str(workdir), "--configfile", str(configfile)]
    return subprocess.run(cmd, capture_output=True, text=True)


def _job_counts(proc) -> dict[str, str]:
    """rule -> jobs, from a dry run's "Job stats" table."""
    assert proc.returncode == 0, proc.stderr[-2000:]
    stats = (proc.stdout + proc.stderr).split("Job stats:")[1]
    return dict(line.split() for line in stats.splitlines()[3:] if len(line.split()) == 2)


def test_snakemake_refuses_bad_config_before_any_job(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_with(["local_epochs"], 0)))
    proc = _dry_run(bad, tmp_path)
    assert proc.returncode != 0
    assert f"experiments.{EXP}.local_epochs' has value 0" in proc.stderr + proc.stdout


def test_a_key_given_twice_is_refused_by_hetfl_and_by_snakemake(tmp_path):
    """YAML keeps the last of two `rounds:` silently (an audit ran rounds 40 where the file also said 4)."""
    dup = tmp_path / "dup.yaml"
    dup.write_text("experiments:\n  e:\n    table: none\n    dataset: synthetic\n"
                   "    settings: {NIID: {alpha: 1, beta: 1}}\n    rounds: 4\n    rounds: 40\n")
    message = ("config key 'rounds' is given twice in one mapping (lines 6 and 7), which is not allowed; "
               "allowed: each key once")
    with pytest.raises(ConfigError, match=re.escape(f"config file {dup}: {message}")):
        load_config(dup)
    proc = _dry_run(dup, tmp_path)
    assert proc.returncode != 0 and message in proc.stderr + proc.stdout
    load_config(ROOT / "workflow/config/quick.yaml")  # YAML merge keys (<<: *anchor) are not duplicates


@pytest.mark.parametrize(("config", "train", "split", "trace", "jobs"), [
    ("ruan2021_table3_synthetic", 2 * 8 * 3 * 5, 2 * 5, 8 * 5, 2),
    ("ruan2021_table3_mnist", 2 * 8 * 3 * 3, 2 * 3, 8 * 3, 2 * 3),
    ("ruan2021_table3_emnist", 2 * 8 * 3 * 3, 2 * 3, 8 * 3, 2 * 3),
    ("ruan2021_table4", 3 * 4 * 2 * 5, 3 * 5, 2 * 5, 2 * 5 + 1),  # datasets × τ0 × {fast, vanilla} × seeds
    ("ruan2021_table5", 3 * 9 * 2 * 5, 3 * 5, 5, 3),  # (α, β) × τ0 × {include, exclude} × seeds
    ("ruan2021_figure5", 2 * 3, 3, 3, 3),
    # {Shakespeare, Sent140} × {FedAvg, EFL} × |T| × seeds
    ("ma2022_efl_text", 4 * 2 * 3, 4 * 3, 2 * 2 * 3, 4 * 3),
    ("ma2022_efl_table2_mnist", 8 * 3, 3, 3, 3),  # Table 2's six + FedProx, SCAFFOLD × seeds
    ("ma2022_efl_table2_cifar100", 8 * 2 * 3, 2 * 3, 3, 2 * 3),  # × {IID, NIID}
    ("ma2022_efl_table2_shakespeare", 6 * 3, 3, 3, 3),
    ("ma2022_efl_table2_sent140", 6 * 3, 3, 3, 3),
    ("objective_inconsistency", 2 * 10 * 3, 2 * 10, 2, 2),  # η × (τ, p) settings × algorithms; a trace per R
    # E × methods × seeds; a trace per (rounds, seed)
    ("tian2022_fedfor_table2", 5 * 4 * 3, 5 * 3, 3 * 3, 5 * 3),
    # Tables 3 and 5 hold out half of a device's samples (FedBN's validation set, as large as its training
    # set: test_fraction 0.5), so the estimate trains on half and bundles more (Table 3: one job)
    ("tian2022_fedfor_table3", 5 * 5 * 3, 5 * 3, 3 * 3, 1),
    ("tian2022_fedfor_table4", 5 * 5 * 3, 5 * 3, 3 * 3, 1),
    ("tian2022_fedfor_table5", 5 * 4 * 3, 5 * 3, 3, 5),
    ("fedelasticnet_comm", 2 * 9 * 3, 2 * 3, 3, 2 * 3),  # Dirichlet 0.3/0.6 × algorithms × seeds
])
def test_snakemake_dry_run_lists_the_paper_grid_alone(config, train, split, trace, jobs, tmp_path):
    """--configfile replaces the embedded default (no merge): only the paper grid is listed; its runs train
    in one job per cell (the runs that share a split), or per setting or experiment where those cells are
    short (hetfl.cluster.cells_per_job: SYNTHETIC Table 3, 4 and 5, objective inconsistency, FedFOR's
    Tables 3-4)."""
    path = ROOT / f"workflow/config/paper/{config}.yaml"
    assert len(list(expand_runs(load_config(path)))) == train
    counts = _job_counts(_dry_run(path, tmp_path))
    assert sum(int(n) for rule, n in counts.items() if rule.startswith("train_")) == jobs
    # splits of large sources are jobs of split_large (a cluster job: hetfl.cluster.split_on_cluster)
    assert int(counts.get("split", 0)) + int(counts.get("split_large", 0)) == split
    assert counts["trace"] == str(trace)


@pytest.mark.parametrize(("level", "jobs"), [("auto", 2), ("cell", 10), ("setting", 2), ("group", 1)])
def test_cells_per_job_sets_the_training_jobs(level, jobs, tmp_path):
    """An experiment's `cells_per_job` overrides the estimate's bundling of the SYNTHETIC Table 3 grid (2
    settings × 5 seeds: a job per setting by the estimate); the runs are the same 240."""
    config = yaml.safe_load((ROOT / "workflow/config/paper/ruan2021_table3_synthetic.yaml").read_text())
    config["experiments"]["ruan2021_table3_synthetic"]["cells_per_job"] = level
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    counts = _job_counts(_dry_run(path, tmp_path))
    assert sum(int(n) for rule, n in counts.items() if rule.startswith("train_")) == jobs
    assert counts["all"] == "1" and len(list(expand_runs(load_config(path)))) == 240


def test_schema_enums_match_the_registries():
    """The schema lists models, datasets and tables by hand: each must exist in its registry and back."""
    from hetfl.config import load_schema
    from hetfl.data.sources import SOURCES
    from hetfl.models import MODELS
    from hetfl.reports.tables import BUILDERS

    exp = load_schema()["$defs"]["experiment"]["properties"]
    assert set(exp["model"]["enum"]) == set(MODELS) | {"quadratic"}
    assert set(exp["dataset"]["enum"]) == {"synthetic", "quadratic"} | set(SOURCES)
    assert set(exp["table"]["enum"]) == set(BUILDERS) | {"none"}


def test_a_jobs_runs_fit_one_argument_and_come_back_equal():
    """specs_to_json: Table 3's 150 runs of one setting (5 seeds) in full outgrow Linux's 128 KiB limit on
    one command-line argument; the common-fields form keeps them well under it and decodes to equal specs."""
    import json

    from hetfl.config import specs_from_data, specs_to_json

    specs = [s for s in expand_runs(load_config("workflow/config/quick.yaml"))
             if s.experiment == "ruan2021_table3_synthetic" and s.split_setting == "NIID"]
    assert len(specs) == 150 and len(json.dumps([s.to_dict() for s in specs])) > 128 * 1024
    text = specs_to_json(specs)
    assert len(text) < 32 * 1024
    assert specs_from_data(json.loads(text)) == specs
    assert specs_from_data([s.to_dict() for s in specs[:3]]) == specs[:3]  # a list of full specs
    assert specs_from_data(json.loads(specs_to_json(specs[:1]))) == specs[:1]
    with pytest.raises(ConfigError, match="a cell is a JSON list of run specs .* got a JSON str"):
        specs_from_data("NIID")


def test_a_reading_that_changes_the_data_has_its_own_split_directory():
    """paths.split_dir is the workflow's data_splits/<split key>: the iid: false reading's split must not be
    the setting's (by hand, `hetfl train --config` remade the setting's own split with the reading's data)."""
    from hetfl import paths

    specs = expand_runs(load_config("workflow/config/quick.yaml"))
    own = next(s for s in specs if s.experiment == "ruan2021_table3_synthetic" and s.reading == "")
    iid = next(s for s in specs if s.experiment == "ruan2021_table3_synthetic" and s.reading == "iid=false")
    assert paths.split_dir(own) == Path("data_splits/ruan2021_table3_synthetic/IID/seed0")
    assert paths.split_dir(iid) == Path("data_splits/ruan2021_table3_synthetic/IID__iid-false/seed0")


def test_a_job_that_validates_no_config_does_not_import_jsonschema():
    """Splits, traces, training and tables import hetfl.config for RunSpec; jsonschema (≈ 60 ms) is loaded
    only where a config is validated, and validation still fills defaults and names the key."""
    code = ("import sys, hetfl.cli; assert 'jsonschema' not in sys.modules, 'imported'; "
            "from hetfl.config import validate_config; validate_config({'experiments': {}}) ")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "imported" not in proc.stderr
    assert "invalid configuration" in proc.stderr  # validation ran, with jsonschema imported then


@pytest.mark.parametrize("job", ["split", "trace"])
def test_split_and_trace_jobs_import_neither_pandas_nor_the_config(tmp_path, job):
    """`hetfl split` of an image source (mnist5k: make reproduce's EFL and FedFOR splits) and `hetfl trace`
    load neither pandas (only partition.describe, for --describe, needs it: 0.4 s of each such job) nor
    hetfl.config (yaml, the algorithm catalog and its plugin entry points: ≈ 0.1 s of each of make
    reproduce's 128 split and trace jobs); the CLI's ConfigError lives in hetfl.errors."""
    spec = next(r for r in expand_runs(validate_config(copy.deepcopy(QUICK)))
                if r.experiment == "ma2022_efl_table2_mnist5k").split_spec()
    out = tmp_path / f"{job}.npz"
    argv = (["split", "--spec", json.dumps(spec), "--seed", "0"] if job == "split" else
            ["trace", "--traceset", "T1", "--num-devices", "5", "--rounds", "3", "--seed", "0"])
    argv += ["--out", str(out)]
    code = ("import sys; from hetfl.cli import main; assert main(sys.argv[1:]) == 0; "
            "loaded = [m for m in ('pandas', 'yaml', 'hetfl.config') if m in sys.modules]; "
            "assert not loaded, f'imported {loaded}'")
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert out.is_file()


#: runs Snakemake (its arguments after it) and, at exit, prints which of pandas, torch and matplotlib were
#: loaded, and which of them hetfl or the workflow imported: an import of one of them (an import statement,
#: through builtins.__import__, or its first load, through a finder) while a frame of src/hetfl, workflow/
#: or the Snakefile was on the stack. Another package's import is not ours: Snakemake loads every installed
#: executor plugin at start, and the SLURM plugin (2.8.0, `make slurm-setup`) imports pandas itself.
WHO_IMPORTS = """
import atexit, builtins, importlib.abc, runpy, sys
WATCHED = ("pandas", "torch", "matplotlib")
OURS = tuple(sys.argv[1] + p for p in ("/src/hetfl/", "/workflow/", "/Snakefile"))
ours = set()
def note(name):
    top, frame = name.partition(".")[0], sys._getframe()
    while top in WATCHED and frame is not None:
        if frame.f_code.co_filename.startswith(OURS):
            ours.add(top)
            break
        frame = frame.f_back
class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        note(name)
plain_import = builtins.__import__
def watched_import(name, *args, **kwargs):
    note(name)
    return plain_import(name, *args, **kwargs)
sys.meta_path.insert(0, Watch())
builtins.__import__ = watched_import
def report():
    print("loaded:", [m for m in WATCHED if m in sys.modules], "by hetfl or the workflow:", sorted(ours),
          file=sys.stderr)
atexit.register(report)
sys.argv = ["snakemake", *sys.argv[2:]]
runpy.run_module("snakemake", run_name="__main__")
"""


def test_a_snakemake_start_imports_no_pandas(tmp_path):
    """Snakemake reads the table and figure registries at every start, a cluster job's included
    (workflow/rules/common.smk), and hetfl.fingerprint asks them which modules a job runs: while they lived
    beside the builders, in hetfl.reports.tables and figures, every start imported pandas (0.4 s of a 2.7 s
    dry run of tiny.yaml). They are hetfl.reports.registry's now; catalog, references and report_pages,
    which the Snakefile also imports, import pandas where they read a CSV. Neither pandas, torch nor
    matplotlib is imported by hetfl or the workflow at a start (WHO_IMPORTS: where the SLURM executor
    plugin is installed, it imports pandas itself)."""
    proc = _dry_run(ROOT / "workflow/config/tiny.yaml", tmp_path, launch=("-c", WHO_IMPORTS, str(ROOT)))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "rule table:" in proc.stdout + proc.stderr  # the dry run planned the tables, figures and pages
    assert "by hetfl or the workflow: []" in proc.stderr, proc.stderr[-500:]


def test_an_event_that_moves_the_objective_is_refused_with_a_running_sum_algorithm():
    """SCAFFOLD's c, FedDyn's h and the tracked corrections are running sums over the devices: an arrival or
    an 'exclude' departure renormalises p^k and left them off Σ p^k (·)_k for the rest of the run (an audit:
    SCAFFOLD stayed at the old optimum after an exclusion). Refused before any work; FedAvg and a departure
    under 'include' (p^k unchanged) stay allowed."""
    exp = {"table": "none", "dataset": "synthetic", "settings": {"N": {"alpha": 1.0, "beta": 1.0}},
           "num_devices": 4, "schemes": ["B"], "num_traces": [1], "rounds": 10, "seeds": [0],
           "algorithms": ["fedavg", "scaffold"],
           "event": {"kind": "departure", "rounds": [5], "policies": ["include", "exclude"]}}
    with pytest.raises(ConfigError, match=r"'experiments\.e\.event' \(departure, policies include, exclude\) "
                                          r"is not allowed with algorithm scaffold: its server state is a "
                                          r"running sum.*allowed: such an event with fedavg, fedprox"):
        validate_config({"experiments": {"e": exp}})
    validate_config({"experiments": {"e": {**exp, "event": {**exp["event"], "policies": ["include"]}}}})
    arrival = {**exp, "algorithms": ["efl"], "schemes": ["C"],
               "event": {"kind": "arrival", "rounds": [5], "policies": ["vanilla"]}}
    with pytest.raises(ConfigError, match="not allowed with algorithm efl"):
        validate_config({"experiments": {"e": arrival}})
    allowed = {**arrival, "algorithms": ["fedavg", "fednova"], "schemes": ["B"]}
    validate_config({"experiments": {"e": allowed}})


TINY = yaml.safe_load((ROOT / "workflow/config/tiny.yaml").read_text())


FEDFOR5 = yaml.safe_load((ROOT / "workflow/config/paper/tian2022_fedfor_table5.yaml").read_text())


@pytest.mark.parametrize(("source", "experiment", "table", "other_table", "cell"), [
    (TINY, "tiny_table3", "accuracy_difference", None, "(dataset SYNTHETIC, setting "),
    (TINY, "tiny_table4", "fast_reboot", None, "τ0 "),
    (TINY, "tiny_table5", "crossing_epochs", None, "alpha "),
    (QUICK, "ma2022_efl_table2_mnist5k", "bmta", None, "(method FedAvg, dataset MNIST, setting NIID, |T| 1, "
                                                       "scheme C, seed 0)"),
    (QUICK, "ma2022_efl_table2_mnist5k", "fairness", "fairness", "(method FedAvg, dataset MNIST, "),
    (QUICK, "ma2022_efl_figure2_mnist5k_lam0", "efl_lambda", None, "λ 0, seed 0)"),
    (QUICK, "fedfor_table2_mnist5k", "fedfor_by_e", None, "(dataset mnist5k, E "),
    (QUICK, "fedelasticnet_comm_mnist5k", "communication_cost", None, "(dataset mnist5k, setting dir0.3, "
                                                                      "method FedProx, seed 0)"),
    (FEDFOR5, "tian2022_fedfor_table5", "fedfor_concept_shift", None, "(dataset domainnet, E 1, method "),
])
def test_two_experiments_with_runs_in_one_cell_are_refused_before_any_job(source, experiment, table,
                                                                          other_table, cell):
    """Two FedAvg experiments on Table 4 with the same setting and τ0 and another step size passed
    validation, trained every run, and then the table job refused the cell (bmta, fairness and Table 3
    likewise; efl_lambda and fedfor_by_e merged the seeds silently). Validation now refuses them, naming
    both experiments, the table, the cell, the key that tells them apart and what is allowed; the same
    experiment on other seeds is allowed."""
    exp = copy.deepcopy(source["experiments"][experiment])
    exp.pop("readings", None)
    exp.pop("readings_grid", None)
    exp["eta0"] = float(exp.get("eta0", 1.0))
    other = {**copy.deepcopy(exp), "eta0": exp["eta0"] * 2, **({"table": other_table}
                                                                       if other_table else {})}
    cfg = {"experiments": {experiment: exp, "copy": other}}
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    text = str(err.value)
    assert (f"config key 'experiments.copy' is not allowed beside experiment {experiment} on table {table}: "
            "both put a run into its cell") in text, text
    assert cell in text, text
    assert f"the two differ in eta0 ({json.dumps(exp['eta0'])} in {experiment}, " in text, text
    assert "allowed: experiments whose runs differ in the cell's keys" in text, text
    other["seeds"] = [max(exp["seeds"]) + 1]
    validate_config(cfg)


FIGURE5 = yaml.safe_load((ROOT / "workflow/config/paper/ruan2021_figure5.yaml").read_text())


def _alone(source: dict, experiment: str) -> dict:
    """One experiment of a shipped config, without its readings axis (which has tables of its own)."""
    exp = copy.deepcopy(source["experiments"][experiment])
    exp.pop("readings", None)
    exp.pop("readings_grid", None)
    return exp


@pytest.mark.parametrize(("source", "experiment", "change", "table", "key", "cell"), [
    (TINY, "tiny_table4", {"schemes": ["C", "B"]}, "fast_reboot", "schemes",
     "τ0 3, policy fast_reboot, seed 0"),
    (TINY, "tiny_table4", {"num_traces": [5, 6]}, "fast_reboot", "num_traces",
     "(dataset SYNTHETIC, setting "),
    (TINY, "tiny_table5", {"num_traces": [5, 6]}, "crossing_epochs", "num_traces", "alpha 1, beta 1, τ0 3"),
    (FIGURE5, "ruan2021_figure5_mnist", {"schemes": ["C", "A"]}, "multiple_arrivals", "schemes",
     "τ0 100, policy fast_reboot, seed 0"),
    (QUICK, "fedfor_table2_mnist5k", {"num_traces": [1, 2]}, "fedfor_by_e", "num_traces",
     "(dataset mnist5k, E 1, method FedAvg, seed 0)"),
    (QUICK, "fedfor_table2_mnist5k", {"settings": {
        **QUICK["experiments"]["fedfor_table2_mnist5k"]["settings"],
        "E4_twice": QUICK["experiments"]["fedfor_table2_mnist5k"]["settings"]["E4"]}},
     "fedfor_by_e", "settings", "(dataset mnist5k, E 4, method FedAvg, seed 0)"),
    (QUICK, "fedelasticnet_comm_mnist5k", {"num_traces": [1, 2]}, "communication_cost", "num_traces",
     "(dataset mnist5k, setting dir0.3, method FedProx, seed 0)"),
    (QUICK, "objective_inconsistency", {"num_traces": [1, 2]}, "objective_inconsistency", "num_traces",
     "(τ (2, 10), setting t2_10_p_equal, η 0.01, method fedavg, seed 0)"),
])
def test_one_experiments_runs_in_one_cell_are_refused_before_any_job(source, experiment, change, table, key,
                                                                      cell):
    """One experiment whose grid puts two runs of one seed into one cell (a Table 4 experiment with two
    schemes or two |T|, FedFOR's E twice under two setting names, a second |T| where the table has no |T|
    column) passed validation, trained every run, and then the table job refused the cell (Tables 4-5,
    Figure 5's table) or merged the seeds silently (fedfor_by_e, communication_cost,
    objective_inconsistency). Validation now refuses it, naming the grid axis, its value, the table, the
    cell and what is allowed; the shipped experiment (one value on that axis) validates."""
    exp = _alone(source, experiment)
    validate_config({"experiments": {experiment: copy.deepcopy(exp)}})
    with pytest.raises(ConfigError) as err:
        validate_config({"experiments": {experiment: {**exp, **copy.deepcopy(change)}}})
    text = str(err.value)
    value = json.dumps(list(change[key]))
    assert (f"config key 'experiments.{experiment}.{key}' has value {value}, which is not allowed with "
            f"table {table}: its runs ") in text, text
    assert cell in text, text
    assert f"the two differ in {key} (" in text, text
    assert f"allowed: one value of {key} (or values whose runs differ in the cell's keys: " in text, text


def test_readings_variants_are_not_refused_as_runs_of_one_cell():
    """The readings axis puts a variant of each run beside it, with the same cell keys: the variants have
    tables of their own (<table>_readings, a column per reading), so the shipped tiny Table 4 and its
    boost reading validate."""
    exp = copy.deepcopy(TINY["experiments"]["tiny_table4"])
    assert exp["readings"]
    validate_config({"experiments": {"tiny_table4": exp}})


def _refusal(cfg: dict) -> str:
    """The ConfigError validation raises on (a copy of) cfg, as text."""
    with pytest.raises(ConfigError) as err:
        validate_config(copy.deepcopy(cfg))
    return str(err.value)


def test_two_objective_inconsistency_experiments_in_one_cell_are_refused_before_any_job():
    """objective_inconsistency groups runs by (τ, setting, η, algorithm) and merged the seeds of two
    experiments in one cell silently (its x̃ the mean over both): e.g. the shipped experiment and a copy with
    more rounds. Refused at validation, naming both experiments and the cell; the copy at another η (a
    column of the table) or on other seeds validates."""
    exp = _alone(QUICK, "objective_inconsistency")
    cfg = {"experiments": {"objective_inconsistency": exp, "longer": {**copy.deepcopy(exp), "rounds": 600}}}
    text = _refusal(cfg)
    assert ("config key 'experiments.longer' is not allowed beside experiment objective_inconsistency on "
            "table objective_inconsistency: both put a run into its cell (τ (2, 10), setting t2_10_p_equal, "
            "η 0.01, method fedavg, seed 0)") in text, text
    assert "the two differ in rounds (300 in objective_inconsistency, 600 in longer)" in text, text
    validate_config({"experiments": {**cfg["experiments"], "longer": {**cfg["experiments"]["longer"],
                                                                      "eta0": 0.05}}})
    validate_config({"experiments": {**cfg["experiments"], "longer": {**cfg["experiments"]["longer"],
                                                                      "seeds": [1]}}})


def test_two_sources_of_one_paper_label_on_bmta_are_refused_before_any_job():
    """bmta groups runs by the paper's label (mnist and mnist5k are both "MNIST") and refused two sources of
    one label after every run trained, even in cells of their own (another setting). Validation refuses
    them, naming the key, both sources and what is allowed; the same experiment on mnist5k validates."""
    exp = _alone(QUICK, "ma2022_efl_table2_mnist5k")
    other = {**copy.deepcopy(exp), "dataset": "mnist", "settings": {"NIID_full": exp["settings"]["NIID"]}}
    cfg = {"experiments": {"ma2022_efl_table2_mnist5k": exp, "full": other}}
    text = _refusal(cfg)
    assert ("config key 'experiments.full.dataset' has value \"mnist\", which is not allowed beside "
            "experiment ma2022_efl_table2_mnist5k (dataset \"mnist5k\") on table bmta: both are the paper's "
            "MNIST") in text, text
    assert 'allowed: "mnist5k", as ma2022_efl_table2_mnist5k has, or a source of another label' in text, text
    validate_config({"experiments": {**cfg["experiments"], "full": {**other, "dataset": "mnist5k"}}})


FEDFOR2 = "fedfor_table2_mnist5k"


@pytest.mark.parametrize("table", ["fedfor_by_e", "fedfor_concept_shift"])
def test_two_algorithms_of_one_display_label_on_a_fedfor_table_are_refused_before_any_job(table,
                                                                                        monkeypatch):
    """FedFOR's tables group a cell's runs by the method's display label (method_label), validation's cell
    check by the algorithm's name: a plugin registered with the label "FedAvg" beside fedavg (in one
    experiment, or in two) passed validation, and the table merged both algorithms' seeds into FedAvg's
    cell. Validation now refuses them, naming the key and the cell; one algorithm under two
    hyperparameter settings was refused already and still is; the plugin under a label of its own
    validates."""
    from hetfl.algorithms import CATALOG
    from hetfl.algorithms.hparams import NoParams
    from hetfl.algorithms.registry import AlgorithmEntry

    def plugin(label: str) -> AlgorithmEntry:
        return AlgorithmEntry("fedavg_copy", "hetfl.algorithms.fedavg:FedAvg", NoParams, "a plugin", label)

    monkeypatch.setitem(CATALOG, "fedavg_copy", plugin("FedAvg"))
    exp = {**_alone(QUICK, FEDFOR2), "table": table, "algorithms": ["fedavg", "fedavg_copy"]}
    if table != "fedfor_by_e":
        del exp["acc_x"]  # only fedfor_by_e reads it
    text = _refusal({"experiments": {FEDFOR2: exp}})
    assert (f"config key 'experiments.{FEDFOR2}.algorithms' has value [\"fedavg\", \"fedavg_copy\"], which "
            f"is not allowed with table {table}: its runs ") in text, text
    assert "(dataset mnist5k, E 1, method FedAvg, seed 0)" in text, text
    assert 'the two differ in algorithms ("fedavg" and "fedavg_copy")' in text, text
    two = {FEDFOR2: {**exp, "algorithms": ["fedavg"]}, "copy": {**exp, "algorithms": ["fedavg_copy"]}}
    text = _refusal({"experiments": two})
    assert (f"config key 'experiments.copy' is not allowed beside experiment {FEDFOR2} on table {table}: "
            "both put a run into its cell (dataset mnist5k, E 1, method FedAvg, seed 0)") in text, text
    assert f'the two differ in algorithm ("fedavg" in {FEDFOR2}, "fedavg_copy" in copy)' in text, text
    fedfor = {**exp, "algorithms": ["fedfor"]}
    text = _refusal({"experiments": {FEDFOR2: fedfor, "copy": {**fedfor, "algorithm_params": {
        "fedfor": {"alpha": 1.0}}}}})
    assert "both put a run into its cell (dataset mnist5k, E 1, method FedFOR, seed 0)" in text, text
    monkeypatch.setitem(CATALOG, "fedavg_copy", plugin("FedAvg (copy)"))
    validate_config({"experiments": {FEDFOR2: exp}})


@pytest.mark.parametrize(("table", "experiment", "beside", "label", "cell"), [
    ("bmta", MLP_EXP, "fedavg", "FedAvg", "(method FedAvg, dataset MNIST, setting NIID, |T| 1, scheme C, "),
    ("fairness", MLP_EXP, "fedavg", "FedAvg", "(method FedAvg, dataset MNIST, setting NIID, |T| 1, "),
    ("communication_cost", "fedelasticnet_comm_mnist5k", "topk_ef", "FedAvg + top-k + EF",
     "(dataset mnist5k, setting dir0.3, method FedAvg + top-k + EF, seed 0)"),
])
def test_two_algorithms_of_one_printed_name_on_a_method_table_are_refused_before_any_job(
        table, experiment, beside, label, cell, monkeypatch):
    """bmta's .md keys its rows by the method's display label (and reads the paper's value by it), and
    communication_cost's by its row name (reports.labels): a plugin labelled "FedAvg" beside fedavg, or
    "FedAvg + top-k + EF" beside topk_ef, passed validation, and the .md showed one row, the later
    algorithm's cells over the earlier's (fairness: two rows of one name). Validation now refuses them,
    naming the algorithms key and the cell; a label of the plugin's own validates."""
    from hetfl.algorithms import CATALOG
    from hetfl.algorithms.hparams import NoParams
    from hetfl.algorithms.registry import AlgorithmEntry

    def plugin(name: str) -> AlgorithmEntry:
        return AlgorithmEntry("mine", "hetfl.algorithms.fedavg:FedAvg", NoParams, "a plugin", name)

    monkeypatch.setitem(CATALOG, "mine", plugin(label))
    exp = {**_alone(QUICK, experiment), "table": table, "algorithms": [beside, "mine"]}
    text = _refusal({"experiments": {experiment: exp}})
    assert (f"config key 'experiments.{experiment}.algorithms' has value [\"{beside}\", \"mine\"], which is "
            f"not allowed with table {table}: its runs ") in text, text
    assert cell in text, text
    assert f'the two differ in algorithms ("{beside}" and "mine")' in text, text
    monkeypatch.setitem(CATALOG, "mine", plugin(f"{label} (mine)"))
    validate_config({"experiments": {experiment: exp}})


def test_snakemake_dry_run_of_the_fedfor_readings_check_builds_its_readings_table(tmp_path):
    """workflow/config/checks/fedfor_fedbn_readings.yaml: Table 3's grid plus its readings axis on E = 1
    (4 readings × 5 methods × 3 seeds), each reading a split of its own per seed, and the readings table."""
    path = ROOT / "workflow/config/checks/fedfor_fedbn_readings.yaml"
    counts = _job_counts(_dry_run(path, tmp_path))
    assert counts["table_readings"] == "1" and counts["table"] == "1"
    # DomainNet is a large source: its splits are jobs of split_large (hetfl.cluster.split_on_cluster)
    assert int(counts.get("split", 0)) + int(counts.get("split_large", 0)) == 5 * 3 + 4 * 3


def _with_partition(partition: dict, sizes: str | None) -> tuple[dict, dict]:
    """QUICK with only its MLP experiment, its NIID setting's partition `partition`, its sizes `sizes`."""
    cfg = copy.deepcopy(QUICK)
    cfg["experiments"] = {MLP_EXP: cfg["experiments"][MLP_EXP]}
    exp = cfg["experiments"][MLP_EXP]
    exp["settings"]["NIID"]["partition"] = partition
    if sizes:
        exp["sizes"] = {"distribution": sizes}
    return cfg, exp


@pytest.mark.parametrize(("partition", "sizes", "key", "shown", "why", "allowed"), [
    ({"label_skew": "dirichlet", "m": 5}, None, "m", "5", "label_skew \"dirichlet\"", "alpha, min_size"),
    ({"label_skew": "pathological", "m": 2, "alpha": 0.1}, None, "alpha", "0.1",
     "label_skew \"pathological\"", "m, label_choice, equal_counts"),
    ({"label_skew": "iid", "shards_per_client": 3}, None, "shards_per_client", "3", "label_skew \"iid\"",
     "equal_counts"),
    ({"label_skew": "shards", "label_choice": "cyclic"}, None, "label_choice", "\"cyclic\"",
     "label_skew \"shards\"", "shards_per_client"),
    ({"label_skew": "longtail", "client_fraction": 0.25, "draw": "independent", "equal_counts": False}, None,
     "equal_counts", "false", "label_skew \"longtail\"", "imbalance_ratio, client_fraction, draw"),
    ({"label_skew": "iid", "equal_counts_pick": "random"}, None, "equal_counts_pick", "\"random\"",
     "label_skew \"iid\"", "equal_counts"),
    ({"label_skew": "dirichlet", "alpha": 0.3, "min_size": 20}, "pareto", "min_size", "20",
     f"label_skew \"dirichlet\" and experiments.{MLP_EXP}.sizes.distribution \"pareto\" (a size skew",
     "alpha"),
    ({"label_skew": "longtail", "client_fraction": 0.25}, "lognormal", "client_fraction", "0.25",
     f"label_skew \"longtail\" and experiments.{MLP_EXP}.sizes.distribution \"lognormal\" (a size skew",
     "imbalance_ratio, draw"),
])
def test_a_partition_key_its_label_skew_does_not_read_is_refused(partition, sizes, key, shown, why, allowed):
    """m beside label_skew dirichlet, alpha beside pathological, shards_per_client beside iid, Dirichlet's
    min_size beside a size skew (FedDyn's split, no redraw) passed: the split ignored them and every run
    recorded them (an audit)."""
    cfg, exp = _with_partition(partition, sizes)
    _refused(cfg, f"config key 'experiments.{MLP_EXP}.settings.NIID.partition.{key}' has value {shown}, "
                  f"which is not allowed with {why}")
    _refused(cfg, f"(it does not read it); allowed: {allowed}" if sizes is None else f"; allowed: {allowed}")
    # what the schema fills in (alpha 0.5, m 2, ...) is not refused (longtail's client_fraction and draw
    # kept: at the default 0.1 mnist5k's tail class rounds to 0 samples)
    kept = ("label_skew",) if sizes else ("label_skew", "client_fraction", "draw")
    exp["settings"]["NIID"]["partition"] = {k: v for k, v in partition.items() if k in kept}
    validate_config(validate_config(cfg))  # hetfl project validates a validated config again


@pytest.mark.parametrize(("partition", "sizes", "key", "shown", "allowed"), [
    ({"label_skew": "dirichlet", "m": 2}, None, "m", "2", "alpha, min_size"),
    ({"label_skew": "pathological", "alpha": 0.5}, None, "alpha", "0.5", "m, label_choice, equal_counts"),
    ({"label_skew": "iid", "shards_per_client": 2}, None, "shards_per_client", "2", "equal_counts"),
    ({"label_skew": "shards", "imbalance_ratio": 0.01}, None, "imbalance_ratio", "0.01", "shards_per_client"),
    ({"label_skew": "dirichlet", "min_size": 10}, "pareto", "min_size", "10", "alpha"),
])
def test_a_partition_key_at_its_schema_default_is_refused_where_it_is_not_read(partition, sizes, key, shown,
                                                                              allowed):
    """m: 5 beside dirichlet was refused and m: 2 passed: validation filled the schema's defaults (m 2, ...)
    into every partition before the check, which therefore let a written default through."""
    cfg, exp = _with_partition(partition, sizes)
    _refused(cfg, f"config key 'experiments.{MLP_EXP}.settings.NIID.partition.{key}' has value {shown}, "
                  f"which is not allowed with label_skew \"{partition['label_skew']}\"")
    _refused(cfg, f"; allowed: {allowed}")
    exp["settings"]["NIID"]["partition"] = {"label_skew": partition["label_skew"]}
    validated = validate_config(cfg)
    assert validated["experiments"][MLP_EXP]["settings"]["NIID"]["partition"][key] == json.loads(shown)
    # validation's own output validates again unchanged, as a dict and as the config file hetfl project
    # writes for its workflow (projection.scaled_config, then Snakemake's --configfile)
    assert validate_config(validated) == validated
    assert validate_config(yaml.safe_load(yaml.safe_dump(validated, sort_keys=False))) == validated


@pytest.mark.parametrize("table", ["bmta", "communication_cost", "none", "fedfor_concept_shift"])
def test_acc_x_outside_the_fedfor_tables_is_refused(table):
    """acc_x: 60 beside a table that is not FedFOR's by-E table (only fedfor_by_e reads it; Table 5, the
    concept shift, has no ACC_x column) passed, and every run recorded it (an audit)."""
    cfg = copy.deepcopy(QUICK)
    cfg["experiments"] = {MLP_EXP: cfg["experiments"][MLP_EXP]}
    cfg["experiments"][MLP_EXP].update(acc_x=60, table=table)
    _refused(cfg, f"config key 'experiments.{MLP_EXP}.acc_x' has value 60, which is not allowed with table "
                  f"{table} (it does not read it); allowed: acc_x only with table fedfor_by_e")
    cfg["experiments"][MLP_EXP]["table"] = "fedfor_by_e"
    validate_config(cfg)


@pytest.mark.parametrize(("exp", "key", "value", "shown"), [
    (EXP, "data_dir", None, None),
    (EXP, "global_test_samples", 500, "500"),
    (EXP, "global_test_samples", "null", "null"),  # the schema's default, written
    (EXP, "global_test", False, "false"),
    (EXP, "global_test", True, "true"),  # the schema's default, written
    ("objective_inconsistency", "data_dir", None, None),
    ("objective_inconsistency", "global_test_samples", 500, "500"),
    ("objective_inconsistency", "global_test", True, "true"),
])
def test_a_source_key_on_generated_data_is_refused(tmp_path, exp, key, value, shown):
    """data_dir, global_test_samples and global_test false on SYNTHETIC or the quadratic bed passed: they
    have no source to read and no global test set, and every run recorded them (an audit). Written at their
    schema defaults (null, true) they passed until 2026-11-27, the message naming the default as allowed."""
    cfg = copy.deepcopy(QUICK)
    cfg["experiments"] = {exp: cfg["experiments"][exp]}
    value = str(tmp_path) if value is None else None if value == "null" else value
    cfg["experiments"][exp][key] = value
    _refused(cfg, f"config key 'experiments.{exp}.{key}' has value {shown or json.dumps(value)}, which is "
                  f"not allowed with dataset \"{cfg['experiments'][exp]['dataset']}\" (it does not read it: "
                  f"no source and no global test set); allowed: {key} only with a real source")
    del cfg["experiments"][exp][key]
    validate_config(validate_config(cfg))


def test_global_test_samples_without_a_global_test_set_is_refused():
    """global_test_samples: 500 beside global_test false passed: there is no global test set to subsample."""
    cfg = copy.deepcopy(QUICK)
    cfg["experiments"] = {MLP_EXP: cfg["experiments"][MLP_EXP]}
    cfg["experiments"][MLP_EXP].update(global_test=False, global_test_samples=500)
    _refused(cfg, f"config key 'experiments.{MLP_EXP}.global_test_samples' has value 500, which is not "
                  "allowed with global_test false (no global test set to subsample: it does not read it); "
                  "allowed: no global_test_samples, or global_test true")
    cfg["experiments"][MLP_EXP]["global_test_samples"] = None  # the schema's default, written
    _refused(cfg, f"config key 'experiments.{MLP_EXP}.global_test_samples' has value null, which is not")
    del cfg["experiments"][MLP_EXP]["global_test_samples"]
    validate_config(validate_config(cfg))
    cfg["experiments"][MLP_EXP].update(global_test=True, global_test_samples=500)
    validate_config(cfg)


@pytest.mark.parametrize(("devices", "refused"), [(30, True), (20, True), (19, False)])
def test_longtail_disjoint_devices_an_offline_sources_classes_cannot_hold_are_refused(devices, refused):
    """longtail with draw disjoint deals every sample once: with mnist5k's 400 images a class, client_fraction
    0.25 (242 images a device, 100 of its head class) and 20 devices every class gives at least 242 + 142,
    and some 484: it passed validation, then the split job said "class ... runs out at client ..." (an audit).
    19 devices can fit, as the smallest class gives 242 + the 9 smallest counts (384) at least."""
    cfg = copy.deepcopy(QUICK)
    exp = cfg["experiments"]["fedfor_table2_mnist5k"]
    cfg["experiments"] = {"fedfor_table2_mnist5k": exp}
    for setting in exp["settings"].values():
        setting["partition"] = {**setting["partition"], "draw": "disjoint"}
    exp["num_devices"] = devices
    if not refused:
        validate_config(cfg)
        return
    _refused(cfg, f"config key 'experiments.fedfor_table2_mnist5k.num_devices' has value {devices}, which "
                  "is not allowed with dataset mnist5k and setting E1's partition (label_skew \"longtail\", "
                  "draw \"disjoint\", client_fraction 0.25, imbalance_ratio 0.01)")
    _refused(cfg, "allowed: at most 19 devices, or draw \"independent\" or a smaller client_fraction")


def test_longtail_disjoint_refusal_offers_no_fewer_devices_than_two():
    """Where not even two devices fit (digits' 139 zeros against client_fraction 1, imbalance_ratio 1: 143 of
    every class a device), the refusal said "allowed: at most 0 devices, or ...", under num_devices' floor."""
    cfg = copy.deepcopy(QUICK)
    exp = cfg["experiments"]["fedfor_table2_mnist5k"]
    cfg["experiments"] = {"e": exp}
    exp.update(dataset="digits", num_devices=2, clients_per_round=2)
    for setting in exp["settings"].values():
        setting["partition"] = {"label_skew": "longtail", "client_fraction": 1, "imbalance_ratio": 1}
    _refused(cfg, "its smallest class (139 training samples) runs out; allowed: draw \"independent\" or a "
                  "smaller client_fraction")
    for setting in exp["settings"].values():
        setting["partition"]["draw"] = "independent"
    validate_config(cfg)


@pytest.mark.parametrize(("dataset", "part", "head", "allowed", "fixed"), [
    # mnist5k: h = floor(0.1 · 4,000 / 10) = 40, 40 · 0.01 = 0.4; 0.25 gives h = 100, a tail of 1
    ("mnist5k", {}, 40, "client_fraction 0.25 or more, or a larger imbalance_ratio",
     {"client_fraction": 0.25}),
    # digits: h = floor(0.1 · 1,438 / 10) = 14; h = 100 needs 100 · 10 / 1,438 = 0.69541, shown rounded up
    ("digits", {"draw": "independent"}, 14, "client_fraction 0.6955 or more", {"client_fraction": 0.6955}),
    # mnist5k at 0.01: h = 4; at client_fraction 1 h = 400, 400 · 0.001 = 0.4: only ρ ≥ 1/4 helps
    ("mnist5k", {"client_fraction": 0.01, "imbalance_ratio": 0.001}, 4,
     "imbalance_ratio 0.25 or more at this client_fraction (at client_fraction 1, its largest, the tail "
     "would still round to 0)", {"imbalance_ratio": 0.25}),
    # mnist5k at 0.001: h = 0, no ratio helps; at client_fraction 1, h = 400 needs ρ ≥ 0.0025
    ("mnist5k", {"client_fraction": 0.001, "imbalance_ratio": 0.001}, 0,
     "client_fraction 1 with imbalance_ratio 0.0025 or more",
     {"client_fraction": 1, "imbalance_ratio": 0.0025, "draw": "independent"}),
])
def test_a_longtail_tail_of_0_samples_is_refused_before_the_split(dataset, part, head, allowed, fixed):
    """longtail gives a device int(h · imbalance_ratio) samples of its tail class: at 0 the split job failed
    ("its tail ... rounds to 0; raise client_fraction or the sizes") after validation passed (an audit:
    mnist5k at the default client_fraction). The suggested value validates."""
    cfg = copy.deepcopy(QUICK)
    exp = cfg["experiments"]["fedfor_table2_mnist5k"]
    cfg["experiments"] = {"e": exp}
    exp.update(dataset=dataset, num_devices=10)
    for setting in exp["settings"].values():
        setting["partition"] = {"label_skew": "longtail", **part}
    _refused(cfg, "config key 'experiments.e.settings.E1.partition.client_fraction' has value "
                  f"{part.get('client_fraction', 0.1)}, which is not allowed with dataset {dataset} and "
                  f"imbalance_ratio {part.get('imbalance_ratio', 0.01)}: a device's head class holds {head} "
                  f"samples, so its tail class rounds to 0; allowed: {allowed}")
    for setting in exp["settings"].values():
        setting["partition"].update(fixed)
    validate_config(cfg)


def test_class_counts_are_the_sources():
    """The per-class training counts validation checks longtail's disjoint draw against are the offline
    sources' own; a published source's have its classes and add up to its training samples."""
    import numpy as np

    from hetfl.cluster import SOURCE_SIZES
    from hetfl.config import CLASS_COUNTS
    from hetfl.data.sources import SOURCES, load_source

    for name in ("digits", "mnist5k"):
        assert tuple(np.bincount(load_source(name, split="train").y).tolist()) == CLASS_COUNTS[name], name
    for name, counts in CLASS_COUNTS.items():
        assert (len(counts), sum(counts)) == (SOURCES[name].num_classes, SOURCE_SIZES[name][0]), name


@pytest.mark.parametrize(("dataset", "devices", "most"), [("cifar10", 45, 44), ("mnist", 40, 39)])
def test_longtail_disjoint_devices_a_published_sources_classes_cannot_hold_are_refused(dataset, devices,
                                                                                       most):
    """The full sources' published class counts refuse at validation what their split job refused after the
    download. CIFAR-10 at client_fraction 0.1 gives a device 500, 299, 179, 107, 64, 38, 23, 13, 8 and 5
    images of its classes by rank (1,236), so 4 full blocks of 10 devices take 4,944 of every class, and 4
    more devices at least 5 + 8 + 13 + 23 = 49 of the 56 left; a 5th takes at least 38 more. MNIST: 600,
    359, 215, 129, 77, 46, 27, 16, 10, 6 (1,485); 5,421 fives hold 3 blocks (4,455) and 9 more devices
    (885 of 966), not a 10th."""
    cfg = copy.deepcopy(QUICK)
    exp = cfg["experiments"]["fedfor_table2_mnist5k"]
    cfg["experiments"] = {"e": exp}
    exp.update(dataset=dataset, num_devices=devices)
    for setting in exp["settings"].values():
        setting["partition"] = {**setting["partition"], "draw": "disjoint", "client_fraction": 0.1}
    _refused(cfg, f"config key 'experiments.e.num_devices' has value {devices}, which is not allowed with "
                  f"dataset {dataset} and setting E1's partition (label_skew \"longtail\", draw \"disjoint\"")
    _refused(cfg, f"allowed: at most {most} devices")
    exp["num_devices"] = most
    validate_config(cfg)


def test_source_sizes_of_the_offline_sources_are_theirs():
    """cluster.SOURCE_SIZES, which validation checks sizes against (and the cluster's estimates read), holds
    the offline sources' real (train, test) counts: digits' read (1,437, 360) against its 1,438 and 359."""
    from hetfl.cluster import SOURCE_SIZES
    from hetfl.data.sources import load_source

    for name in ("digits", "mnist5k"):
        assert SOURCE_SIZES[name] == tuple(len(load_source(name, split=s).y) for s in ("train", "test")), name


@pytest.mark.parametrize(("exp", "sizes", "message"), [
    # every device was clipped to max_size: the skew or the size asked for silently gone
    (EXP, {"distribution": "equal", "size": 5000}, "'experiments.{e}.sizes.size' has value 5000, which is "
     "not allowed with sizes.max_size 1000 (every count is clipped to the cap, so no device would hold "
     "5000); allowed: at most 1000, or a larger max_size"),
    (EXP, {"distribution": "pareto", "size": 20, "max_size": 10**30}, "'experiments.{e}.sizes.max_size' has "
     "value 1000000000000000000000000000000, which is not allowed; allowed: <= 9007199254740992"),
    # cast past int64: every device of the real source got 0 samples
    ("fedelasticnet_comm_mnist5k", {"distribution": "lognormal", "size": 40, "max_size": 10**20},
     "'experiments.{e}.sizes.max_size' has value 100000000000000000000, which is not allowed; allowed: <= "
     "9007199254740992"),
    # a device asking for more than the source holds, a floor the source cannot give every device
    ("fedelasticnet_comm_mnist5k", {"distribution": "lognormal", "size": 5000, "max_size": 6000},
     "'experiments.{e}.sizes.size' has value 5000, which is not allowed with dataset mnist5k; allowed: at "
     "most 4,000 (its training samples)"),
    ("fedelasticnet_comm_mnist5k", {"distribution": "lognormal", "size": 40, "min_size": 50},
     "'experiments.{e}.sizes.min_size' has value 50, which is not allowed with dataset mnist5k and "
     "num_devices 100; allowed: at most 40 (4,000 training samples over 100 devices)"),
])
def test_sizes_beyond_what_can_be_dealt_are_refused(exp, sizes, message):
    """sizes had no upper bound: a size above max_size was clipped to it silently, a huge max_size cast past
    int64 and dealt every device 0 samples, and on a real source a size or min_size beyond its samples was
    shrunk away in the split (an audit)."""
    cfg = copy.deepcopy(QUICK)
    cfg["experiments"] = {exp: {**cfg["experiments"][exp], "sizes": sizes}}
    _refused(cfg, message.format(e=exp))
    ok = {**sizes, "size": 40, "max_size": 1000, "min_size": 10}
    cfg["experiments"][exp]["sizes"] = ok
    validate_config(cfg)
