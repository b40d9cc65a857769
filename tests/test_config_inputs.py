"""Configs that used to fail only after their split and trace jobs ran are refused at validation
(issue 11, item 11)."""

from __future__ import annotations

import copy
import json

import pytest

from hetfl.config import ConfigError, validate_config

EXP = {"table": "none", "dataset": "synthetic", "settings": {"NIID": {"alpha": 1.0, "beta": 1.0}},
       "num_devices": 4, "schemes": ["B"], "num_traces": [1], "seeds": [0]}
IMAGES = {"dataset": "digits", "settings": {"IID": {"partition": {"label_skew": "iid"}}}}


def _config(**changes):
    return {"experiments": {"e": {**copy.deepcopy(EXP), **changes}}}


@pytest.mark.parametrize("model", ["cnn", "cnn_bn", "cnn_cifar", "resnet20"])
def test_image_model_on_synthetic_features_is_refused(model):
    with pytest.raises(ConfigError) as err:
        validate_config(_config(model=model))
    assert str(err.value) == (f"config key 'experiments.e.model' has value \"{model}\", which is not allowed "
                              "for dataset \"synthetic\" (60 features per sample, not an image); allowed: "
                              "\"logreg\", \"mlp\"")


def test_flat_models_on_synthetic_and_cnn_on_images_are_accepted():
    for model in ("logreg", "mlp"):
        validate_config(_config(model=model))
    validate_config(_config(**IMAGES, model="cnn"))


def test_missing_data_dir_is_refused_and_an_existing_one_accepted(tmp_path):
    real = {**IMAGES, "model": "mlp"}
    missing = tmp_path / "no_such_dir"
    with pytest.raises(ConfigError) as err:
        validate_config(_config(**real, data_dir=str(missing)))
    msg = str(err.value)
    assert f"'experiments.e.data_dir' has value \"{missing}\", which is not an existing directory" in msg
    assert "allowed: a directory holding the data" in msg
    validate_config(_config(**real, data_dir=str(tmp_path)))


def test_a_misspelt_hetfl_data_dir_is_refused_where_a_run_would_read_it(tmp_path, monkeypatch):
    """Only the config key was checked: with HETFL_DATA_DIR misspelt the split job went online and
    downloaded the hub copy into the new directory (offline it stopped after the trace jobs)."""
    hub = {"dataset": "mnist", "settings": {"IID": {"partition": {"label_skew": "iid"}}}, "model": "mlp"}
    missing = tmp_path / "hetfl_dta"
    monkeypatch.setenv("HETFL_DATA_DIR", str(missing))
    with pytest.raises(ConfigError) as err:
        validate_config(_config(**hub))
    msg = str(err.value)
    assert "'experiments.e.data_dir' is not given, and the environment variable HETFL_DATA_DIR" in msg
    assert f'has value "{missing}", which is not an existing directory' in msg
    validate_config(_config(**hub, data_dir=str(tmp_path)))  # the key wins over the variable
    validate_config(_config(**IMAGES, model="mlp"))  # digits reads nothing from the data root
    monkeypatch.setenv("HETFL_DATA_DIR", str(tmp_path))
    validate_config(_config(**hub))


# Keys that nothing reads where they are set were accepted and every run recorded them (stop 45's audit):
# the refusals below failed to raise before the checks.
@pytest.mark.parametrize(("changes", "key", "shown", "why", "allowed"), [
    ({**IMAGES, "sizes": {"distribution": "equal", "size": 50}}, "sizes.size", "50",
     "dataset \"digits\" and distribution \"equal\" (the partition deals the source out itself: ",
     "distribution"),
    ({"sizes": {"distribution": "lognormal", "index": 0.7}}, "sizes.index", "0.7",
     "distribution \"lognormal\" (", "distribution, size, sigma, min_size, max_size"),
    ({"sizes": {"distribution": "pareto", "sigma": 1.0}}, "sizes.sigma", "1.0",
     "distribution \"pareto\" (", "distribution, size, index, min_size, max_size"),
    ({"sizes": {"distribution": "equal", "index": 0.7}}, "sizes.index", "0.7",
     "distribution \"equal\" (", "distribution, size, min_size, max_size"),
])
def test_a_sizes_key_its_distribution_does_not_read_is_refused(changes, key, shown, why, allowed):
    with pytest.raises(ConfigError) as err:
        validate_config(_config(**changes, model="mlp"))
    assert str(err.value) == (f"config key 'experiments.e.{key}' has value {shown}, which is not allowed "
                              f"with {why}it does not read it); allowed: {allowed}")
    # the key written at the schema's default is refused too (validation fills the defaults in first,
    # which let it pass); the one validation filled in is not, nor when hetfl project validates again
    default = {"size": 20, "index": 0.5, "sigma": 0.3}[key.split(".")[1]]
    sizes = {"distribution": changes["sizes"]["distribution"], key.split(".")[1]: default}
    with pytest.raises(ConfigError) as err:
        validate_config(_config(**{**changes, "sizes": sizes}, model="mlp"))
    assert str(err.value) == (f"config key 'experiments.e.{key}' has value {default}, which is not allowed "
                              f"with {why}it does not read it); allowed: {allowed}")
    sizes = {"distribution": changes["sizes"]["distribution"]}
    validated = validate_config(_config(**{**changes, "sizes": sizes}, model="mlp"))
    assert validate_config(validated) == validated


def test_sizes_and_test_fraction_on_the_quadratic_bed_are_refused():
    quad = {"table": "objective_inconsistency", "dataset": "quadratic", "model": "quadratic",
            "settings": {"S": {"a": [1.0, 2.0], "b": [0.0, 1.0]}}, "num_devices": 2}
    with pytest.raises(ConfigError) as err:
        validate_config(_config(**quad, sizes={"distribution": "equal"}))
    assert str(err.value) == (
        "config key 'experiments.e.sizes.distribution' has value \"equal\", which is not allowed with "
        "dataset \"quadratic\" (its devices hold closed-form objectives, not samples: it does not read it); "
        "allowed: no sizes (the defaults)")
    with pytest.raises(ConfigError) as err:
        validate_config(_config(**quad, test_fraction=0.3))
    assert str(err.value) == (
        "config key 'experiments.e.test_fraction' has value 0.3, which is not allowed with dataset "
        "\"quadratic\" (its devices hold closed-form objectives, no samples to hold out: it does not read "
        "it); allowed: no test_fraction")
    with pytest.raises(ConfigError) as err:  # the schema's default, written: the message named it allowed
        validate_config(_config(**quad, test_fraction=0.2))
    assert "'experiments.e.test_fraction' has value 0.2, which is not allowed" in str(err.value)
    validate_config(validate_config(_config(**quad)))
    with pytest.raises(ConfigError) as err:  # the schema's default, written
        validate_config(_config(**quad, sizes={"distribution": "pareto"}))
    assert str(err.value).startswith("config key 'experiments.e.sizes.distribution' has value \"pareto\", "
                                     "which is not allowed with dataset \"quadratic\"")


def test_population_sampling_weights_without_clients_per_round_are_refused():
    with pytest.raises(ConfigError) as err:
        validate_config(_config(sampling_weights="population"))
    assert str(err.value) == (
        "config key 'experiments.e.sampling_weights' has value \"population\", which is not allowed "
        "without clients_per_round (every device takes part in every round, so there is no sampled set to "
        "weigh over: it does not read it); allowed: no sampling_weights, or clients_per_round set")
    with pytest.raises(ConfigError) as err:  # the schema's default, written: the message named it allowed
        validate_config(_config(sampling_weights="sampled"))
    assert "'experiments.e.sampling_weights' has value \"sampled\", which is not allowed" in str(err.value)
    validate_config(validate_config(_config(sampling_weights="population", clients_per_round=2)))
    validate_config(validate_config(_config(sampling_weights="sampled", clients_per_round=2)))


def test_eta0_beyond_float32_is_refused():
    """eta0 1e39 is inf in the float32 models: the audit saw a training traceback."""
    for changes, key in (({"eta0": 1e39}, "eta0"),
                         ({"table": "accuracy_difference", "readings": {"eta0": [1e39]}}, "readings.eta0.0")):
        with pytest.raises(ConfigError) as err:
            validate_config(_config(**changes))
        assert (f"config key 'experiments.e.{key}' has value 1e+39, which is not allowed; allowed: "
                "<= 3.4028234663852886e+38") in str(err.value)
    validate_config(_config(eta0=3.4028234663852886e38))


@pytest.mark.parametrize("where", ["p_inactive", "readings.p_inactive"])
def test_a_p_inactive_whose_trace_file_name_is_too_long_is_refused(where):
    """A trace file's name writes p_inactive in every digit (config._positional): 5e-324 named a file of
    346 bytes, which the trace job could not write, after validation passed."""
    changes = {"num_traces": [6]}  # T_hi is the sixth trace: p_inactive applies
    changes.update({"p_inactive": 5e-324} if where == "p_inactive"
                   else {"table": "accuracy_difference", "readings": {"p_inactive": [5e-324]}})
    with pytest.raises(ConfigError) as err:
        validate_config(_config(**changes))
    assert str(err.value) == (
        f"config key 'experiments.e.{where}' has value 5e-324, which is not allowed: its trace file name "
        "(n4_r200_seed0_pi0.0000000000000000000000…) writes it in 326 characters and is 346 bytes; allowed: "
        "a p_inactive written in at most 235 characters (a file name holds 255 bytes)")
    validate_config(_config(**{**changes, "p_inactive": 1e-100} if where == "p_inactive" else
                            {**changes, "readings": {"p_inactive": [1e-100]}}))


def test_more_devices_than_a_size_skew_can_floor_are_refused_by_num_devices():
    """With a size skew on a real source, min_size × num_devices above its training samples was refused as
    "sizes.min_size ... allowed: at most 1" for more than half as many devices as samples: min_size is at
    least 2, so the suggestion could not be taken. num_devices is then the key at fault."""
    real = {**IMAGES, "dataset": "mnist5k", "model": "mlp", "sizes": {"distribution": "pareto"}}
    with pytest.raises(ConfigError) as err:
        validate_config(_config(**real, num_devices=3000))
    assert str(err.value) == (
        "config key 'experiments.e.num_devices' has value 3000, which is not allowed with dataset mnist5k "
        "and sizes.distribution \"pareto\" (every device holds at least sizes.min_size samples, and min_size "
        "is at least 2); allowed: at most 2,000 (4,000 training samples over devices of 2)")
    with pytest.raises(ConfigError) as err:  # at 2,000 devices, min_size's own bound is allowed: 2
        validate_config(_config(**real, num_devices=2000))
    assert str(err.value).endswith("allowed: at most 2 (4,000 training samples over 2000 devices)")
    validate_config(_config(**{**real, "sizes": {"distribution": "pareto", "min_size": 2}}, num_devices=2000))


def test_a_lognormal_sigma_of_0_is_refused():
    """The schema allowed sigma >= 0, data.sizes.SizeSpec > 0: sigma 0 passed validation, then every split
    job failed ("SizeSpec.sigma=0 must be a finite number > 0")."""
    with pytest.raises(ConfigError) as err:
        validate_config(_config(sizes={"distribution": "lognormal", "sigma": 0}))
    assert str(err.value) == ("invalid configuration:\n  config key 'experiments.e.sizes.sigma' has value 0, "
                              "which is not allowed; allowed: > 0")
    validate_config(_config(sizes={"distribution": "lognormal", "sigma": 5e-324}))


def test_an_integer_beyond_a_float_is_refused_with_a_config_error():
    """YAML reads 1 followed by 400 zeros as an int; the finite-number check (math.isfinite) raised
    OverflowError ("int too large to convert to float") instead of naming the key."""
    big = 10**400
    with pytest.raises(ConfigError) as err:
        validate_config(_config(num_devices=big, seeds=[big]))
    assert f"config key 'experiments.e.seeds.0' has value {big}, which is not allowed; allowed: <= " \
           "18446744073709551615" in str(err.value)
    with pytest.raises(ConfigError) as err:
        validate_config(_config(test_fraction=big))
    assert str(err.value) == (f"invalid configuration:\n  config key 'experiments.e.test_fraction' has value "
                              f"{big}, which is not allowed; allowed: < 1")


def test_every_integer_key_has_a_maximum():
    """The schema file leaves most counts unbounded; load_schema bounds each at 2**53, so a key added later
    is bounded too."""
    from hetfl.config import integer_schemas, load_schema

    keys = list(integer_schemas(load_schema()))
    assert len(keys) >= 27  # the walk reaches the nested keys: settings', events', readings' lists
    assert [k for k in keys if "maximum" not in k and "exclusiveMaximum" not in k] == []


#: the config that writes a nested key's value (the others are experiment keys)
_NESTED = {
    "settings.NIID.local_epochs":
        lambda v: {"settings": {"NIID": {**EXP["settings"]["NIID"], "local_epochs": v}}},
    "readings.local_epochs.0": lambda v: {"table": "accuracy_difference", "readings": {"local_epochs": [v]}},
}


@pytest.mark.parametrize(("key", "value"), [
    ("local_epochs", 2**63 - 1), ("local_epochs", 2**63), ("rounds", 2**53 + 1), ("batch_size", 2**63),
    ("eval_every", 2**63), ("num_devices", 2**53 + 1), ("settings.NIID.local_epochs", 2**63),
    ("readings.local_epochs.0", 2**63),
])
def test_a_count_beyond_2_53_is_refused(key, value):
    """local_epochs 2**63 - 1 passed and trained: each device's f · E rounded up to 2**63 in float64, int64
    wrapped it to its minimum, every device did one step and none was complete, so Scheme A discarded
    every round in silence. Counts are bounded where float64 holds them exactly."""
    changes = _NESTED[key](value) if key in _NESTED else {key: value}
    with pytest.raises(ConfigError) as err:
        validate_config(_config(**changes))
    assert str(err.value) == (f"invalid configuration:\n  config key 'experiments.e.{key}' has value "
                              f"{value}, which is not allowed; allowed: <= 9007199254740992 (2**53, the "
                              "largest count float64 holds exactly)")


def test_counts_at_2_53_and_seeds_up_to_2_64_are_accepted():
    validate_config(_config(local_epochs=2**53, batch_size=2**53, eval_every=2**53))
    big = 2**64 - 1  # torch's generator takes it: readings_grid.seeds may name any seed
    validate_config(_config(table="accuracy_difference", seeds=[0, big], readings={"local_epochs": [3]},
                            readings_grid={"seeds": [big]}))


@pytest.mark.parametrize(("key", "value"), [("rounds", 200), ("rounds", 7), ("local_epochs", 3),
                                            ("local_steps", [1, 2, 3, 4])])
def test_an_experiment_key_every_setting_overrides_is_refused(key, value):
    """rounds: 7 beside settings that each set their own rounds passed, and no run read it (a fuzz audit);
    at its default (200) too. One setting without its own keeps it read, and hetfl project's scaled copy
    (validation's output, its rounds scaled beside the settings') is read by value."""
    own = [1, 1, 1, 1] if key == "local_steps" else 5
    settings = {"S1": {"alpha": 1.0, "beta": 1.0, key: own}, "S2": {"alpha": 0.5, "beta": 0.5, key: own}}
    with pytest.raises(ConfigError) as err:
        validate_config(_config(settings=settings, **{key: value}))
    assert str(err.value) == (f"config key 'experiments.e.{key}' has value {json.dumps(value)}, which is not "
                              f"allowed where every setting sets its own {key} (no run reads it); allowed: "
                              f"{key} in the settings only, or a setting without one")
    validated = validate_config(_config(settings=settings))
    validated["experiments"]["e"][key] = value
    validate_config(validated)
    del settings["S2"][key]
    validate_config(_config(settings=settings, **{key: value}))
