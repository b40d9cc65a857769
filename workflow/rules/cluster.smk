# Cluster placement (issue 15): which rules stay on the submitting host, and what a training job asks a
# scheduler for. The estimates live in hetfl.cluster; where jobs go comes from the environment
# (HETFL_SLURM_PARTITION, HETFL_SLURM_GPU_PARTITION, HETFL_SLURM_ACCOUNT or SLURM_ACCOUNT, HETFL_GPUS;
# docs/cluster.md). Without an executor (local runs) groups are ignored and the resources constrain
# nothing unless --resources names them (e.g. --resources gpu=1).
import os
import sys

from hetfl.cluster import ClusterOptions, resource_names, train_device, train_group, train_resources

try:
    CLUSTER = ClusterOptions.from_environ(os.environ)
except ValueError as _err:
    sys.exit(f"hetfl: {_err}")


# Seconds of work each, and they read or write the shared results: never worth a cluster job. (split and
# trace also need the data sources, which compute nodes often cannot download.)
localrules:
    all,
    split,
    trace,
    table,
    figure,
    track,


def train_specs(wc):
    """The runs one train job trains: the run {experiment}/{run}, or, for a rule without a {run}
    wildcard, the cell's runs (same experiment, setting and seed)."""
    if "run" in wc.keys():
        return [RUNS[(wc.experiment, wc.run)]]
    return [s for s in RUNS.values()
            if (s.experiment, s.setting, str(s.seed)) == (wc.experiment, wc.setting, str(wc.seed))]


def train_resource(name):
    return lambda wc, attempt: train_resources(train_specs(wc), CLUSTER, attempt)[name]


TRAIN_RESOURCES = {name: train_resource(name) for name in resource_names(CLUSTER)}


def train_group_of(wc):
    return train_group(train_specs(wc), CLUSTER)


def train_device_of(wc):
    return train_device(train_specs(wc), CLUSTER)
