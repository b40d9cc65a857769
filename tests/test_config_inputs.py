"""Configs that used to fail only after their split and trace jobs ran are refused at validation
(issue 11, item 11)."""

from __future__ import annotations

import copy

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
