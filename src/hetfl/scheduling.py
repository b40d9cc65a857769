"""Job priorities for Snakemake's scheduler (`priority:` of the workflow's rules; docs/engine.md).

An experiment's MLflow mirror (rule track) runs after its tables and figures, and mirrors run one at a
time (`--resources mlflow_store=1`: one SQLite writer), each as long as the experiment's mirrored rows
(MLflow's SQL store inserts ~0.3 ms per value). Left to Snakemake's default order the experiments with the
largest mirrors finished training last, and their mirrors ran one after another at the end of
`make reproduce` with the second core idle (Table 5's 125 s, Table 3's 64 s, Table 4's 48 s on a
135 GFLOP/s host). So:

- splits and traces (under a second each) run first, and tables, figures and mirrors as soon as their inputs
  exist (REPORT_PRIORITY, above any training): Snakemake does not pass a job's priority on to its inputs, so
  with priority 0 the splits of later cells waited behind every training job;
- experiments train in the order of their mirror's size, largest first (train_priorities), so the long
  mirrors run beside the other experiments' training.

Priorities only order jobs that are ready at the same time: no result depends on them.
"""

from __future__ import annotations

from collections.abc import Iterable

from hetfl.config import RunSpec

#: splits, traces, tables, figures, report pages and mirrors: above every training priority
REPORT_PRIORITY = 1000


def train_priorities(specs: Iterable[RunSpec]) -> dict[str, int]:
    """experiment -> priority of its training jobs: 1 for the smallest mirror up to one per experiment for
    the largest (ties by name), all below REPORT_PRIORITY. The size of a mirror is its runs' evaluated
    rounds (RunSpec.evaluated_rounds: the steps their metrics are mirrored at) summed."""
    size: dict[str, int] = {}
    for spec in specs:
        size[spec.experiment] = size.get(spec.experiment, 0) + spec.evaluated_rounds
    order = sorted(size, key=lambda e: (size[e], e))
    if len(order) >= REPORT_PRIORITY:
        raise ValueError(f"{len(order)} experiments: train priorities must stay below REPORT_PRIORITY "
                         f"({REPORT_PRIORITY})")
    return {experiment: rank for rank, experiment in enumerate(order, start=1)}
