# Cluster placement (issue 15): which rules stay on the submitting host, and what a training job (or the
# split of a large source) asks a scheduler for. The estimates live in hetfl.cluster; where jobs go comes
# from the environment (HETFL_SLURM_PARTITION, HETFL_SLURM_GPU_PARTITION, HETFL_SLURM_ACCOUNT or
# SLURM_ACCOUNT, HETFL_GPUS, HETFL_SLURM_GPU_GRES, HETFL_SLURM_GPU_GFLOPS, HETFL_SLURM_MAX_RUNTIME,
# HETFL_SLURM_MAX_MEM_MB, HETFL_SLURM_LOCAL_SPLIT_MB; docs/cluster.md). Without an executor (local runs) every job runs here, groups
# are ignored and the resources constrain nothing unless --resources names them (e.g. --resources gpu=1).
import os
import sys

from hetfl.cluster import (ClusterOptions, alternatives, cells_per_job, check_memory, host_memory_bytes,
                           resource_names, split_placement, split_resource_names, split_resources,
                           train_device, train_group, train_groups, train_resources)

try:
    CLUSTER = ClusterOptions.from_environ(os.environ)
    # a trace, a SYNTHETIC split, a minibatch or a model no job could hold: refused before any job runs
    # (hetfl.cluster.check_memory)
    check_memory(list(RUNS.values()), host_memory_bytes(), CLUSTER)
except ValueError as _err:
    sys.exit(f"hetfl: {_err}")

# Experiments whose splits run here (rule split) and those whose splits are cluster jobs (rule split_large):
# a split loads its whole source, and one estimated above HETFL_SLURM_LOCAL_SPLIT_MB (default 1,024 MB:
# EMNIST, CIFAR, FEMNIST, Shakespeare, Sent140, DomainNet, Digits) is too heavy for a login node
# (hetfl.cluster.split_on_cluster).
SPLIT_LOCAL, SPLIT_LARGE = split_placement(config["experiments"], CLUSTER)


# Seconds of work each, and they read or write the shared results: never worth a cluster job. (split and
# trace also need the data sources, which compute nodes often cannot download; split_large, the splits of
# large sources, is a cluster job.) A trace is numpy over devices × rounds: 0.25 s for 772 × 200.
localrules:
    all,
    split,
    trace,
    table,
    table_readings,
    figure,
    split_figure,
    track,
    report_table,
    fidelity_summary,

