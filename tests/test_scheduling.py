"""hetfl.scheduling: the order Snakemake is asked to run jobs in (never what they compute)."""

from dataclasses import replace

import pytest

from hetfl.config import expand_runs, validate_config
from hetfl.scheduling import REPORT_PRIORITY, train_priorities

_BASE = next(iter(expand_runs(validate_config({"experiments": {"e": {
    "table": "none", "dataset": "synthetic", "settings": {"N": {"alpha": 1.0, "beta": 1.0}},
    "schemes": ["A"], "num_traces": [1], "seeds": [0], "num_devices": 4, "rounds": 10}}}))))


def _spec(experiment, rounds, eval_every):
    return replace(_BASE, experiment=experiment, rounds=rounds, eval_every=eval_every)


@pytest.mark.parametrize(("rounds", "eval_every", "expected"), [
    (200, 1, 200),  # Tables 4-5: every round
    (200, 5, 40),   # 5, 10, ..., 200
    (201, 5, 41),   # 5, ..., 200 and the last round, 201
    (3, 10, 1),     # only the last round
])
def test_evaluated_rounds_count_every_kth_round_and_the_last(rounds, eval_every, expected):
    assert _spec("e", rounds, eval_every).evaluated_rounds == expected


def test_experiments_with_larger_mirrors_train_first_and_reports_come_before_any_training():
    specs = ([_spec("table5", 200, 1)] * 3          # 600 evaluated rounds
             + [_spec("table3", 200, 5)] * 10       # 400
             + [_spec("efl", 20, 1)] * 20           # 400: a tie with table3, broken by name
             + [_spec("tiny", 10, 10)])             # 1
    priorities = train_priorities(specs)
    assert priorities == {"tiny": 1, "efl": 2, "table3": 3, "table5": 4}
    assert max(priorities.values()) < REPORT_PRIORITY
