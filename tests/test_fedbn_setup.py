"""FedFOR Tables 3-4 follow FedBN's set-up (docs/fedfor.md): the options where FedFOR's words leave FedBN's
code and hetfl's generic behaviour apart, each tested on a case small enough to work out by hand."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from hetfl.config import ConfigError, expand_runs, validate_config

ROOT = Path(__file__).resolve().parents[1]
TABLE3 = yaml.safe_load((ROOT / "workflow/config/paper/tian2022_fedfor_table3.yaml").read_text())
TABLE4 = yaml.safe_load((ROOT / "workflow/config/paper/tian2022_fedfor_table4.yaml").read_text())
EXP3, EXP4 = "tian2022_fedfor_table3", "tian2022_fedfor_table4"


def _refused(cfg: dict, *parts: str) -> None:
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    for part in parts:
        assert part in str(err.value)


# ---- training size: FedBN's DomainNet trains every domain on int(0.05 * min_data_len) ---------------------


def test_equal_counts_fraction_reaches_the_split_spec_and_is_refused_where_it_cannot_apply():
    cfg = copy.deepcopy(TABLE3)
    exp = cfg["experiments"][EXP3]
    exp["settings"] = {"E1": {"partition": {"label_skew": "natural", "equal_counts": True,
                                            "equal_counts_fraction": 0.05}, "local_epochs": 1, "rounds": 2}}
    runs = list(expand_runs(validate_config(cfg)))
    assert runs and all(r.split_spec()["partition"]["equal_counts_fraction"] == 0.05 for r in runs)
    bad = copy.deepcopy(cfg)
    bad["experiments"][EXP3]["settings"]["E1"]["partition"]["equal_counts_fraction"] = 0
    _refused(bad, f"'experiments.{EXP3}.settings.E1.partition.equal_counts_fraction'", "0")
    bad["experiments"][EXP3]["settings"]["E1"]["partition"]["equal_counts_fraction"] = 1.5
    _refused(bad, f"'experiments.{EXP3}.settings.E1.partition.equal_counts_fraction'", "1.5")
    bad["experiments"][EXP3]["settings"]["E1"]["partition"] = {"label_skew": "natural",
                                                               "equal_counts_fraction": 0.05}
    _refused(bad, f"'experiments.{EXP3}.settings.E1.partition.equal_counts_fraction' has value 0.05, "
                  "which is not allowed with label_skew \"natural\" and equal_counts false; allowed: a share "
                  "of the smallest domain's count only with label_skew \"natural\" and equal_counts true")
