# Cluster placement (issue 15): which rules stay on the submitting host, and what a training job asks a
# scheduler for. The estimates live in hetfl.cluster; where jobs go comes from the environment
# (HETFL_SLURM_PARTITION, HETFL_SLURM_GPU_PARTITION, HETFL_SLURM_ACCOUNT or SLURM_ACCOUNT, HETFL_GPUS,
# HETFL_SLURM_GPU_GRES, HETFL_SLURM_MAX_RUNTIME, HETFL_SLURM_MAX_MEM_MB; docs/cluster.md). Without an executor (local runs) groups are ignored and the
# resources constrain nothing unless --resources names them (e.g. --resources gpu=1).
import os
import sys

from hetfl.cluster import (ClusterOptions, cells_per_job, resource_names, train_device, train_group,
                           train_groups, train_resources)

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
    table_readings,
    figure,
    split_figure,
    track,
    report_table,
    fidelity_summary,

