# One rule per group of cells (the runs sharing a split) whose runs have the same names up to (setting,
# seed) — usually one rule per experiment (hetfl.cluster.train_groups). A job trains one cell, or every cell
# of its setting or of its group when they are short (hetfl.cluster.cells_per_job: a process start costs
# about as much as a small SYNTHETIC cell trains), or as the experiment's `cells_per_job` key says.
# `hetfl train --cell` trains them cell after cell in one process, checkpoints every 20 rounds, and restores
# finished runs from their checkpoints when Snakemake reruns a killed job. The code param reruns a job when
# the code it runs changes (hetfl.fingerprint; Snakemake's params rerun trigger).


from functools import partial


# A train job trains the runs specs_of(wildcards); from them come each job's
# resources (`resources: **cluster_resources(specs_of)`), group and `hetfl train --device`.
def cluster_resources(specs_of):
    return {name: (lambda wc, attempt, name=name: train_resources(specs_of(wc), CLUSTER, attempt)[name])
            for name in resource_names(CLUSTER)}


def cluster_group(specs_of):
    return lambda wc: train_group(specs_of(wc), CLUSTER)


def cluster_device(specs_of):
    return lambda wc: train_device(specs_of(wc), CLUSTER)


def job_cells(exp, suffix, cells, level, wc):
    """The cells a job trains (hetfl.cluster.cells_per_job): its own (setting, seed), every seed of its
    setting, or all the group's cells."""
    if level == "cell":
        return [f"{exp}/{wc.setting}{suffix}/seed{wc.seed}"]
    if level == "setting":
        return [k for k in cells if CELLS[k][0].setting == wc.setting]
    return list(cells)


def job_specs(cells_of, wc):
    return [s for key in cells_of(wc) for s in CELLS[key]]


_GROUPS = train_groups(CELLS)
for _exp, _suffix, _templates, _cells in _GROUPS:
    _first = [CELLS[k][0] for k in _cells]
    _siblings = [g for g in _GROUPS if g[0] == _exp]
    _index = _siblings.index((_exp, _suffix, _templates, _cells))
    _name = re.sub(r"[^A-Za-z0-9_]", "_", f"train_{_exp}")
    _level = cells_per_job({k: CELLS[k] for k in _cells},
                           level=config["experiments"][_exp]["cells_per_job"])
    _cells_of = partial(job_cells, _exp, _suffix, _cells, _level)
    _specs_of = partial(job_specs, _cells_of)
    # outputs: the templates with the wildcards this level keeps ({setting} and {seed}, {setting}, none)
    if _level == "cell":
        _runs = list(_templates)
        _log = f"logs/train/{_exp}/cell_{{setting}}{_suffix}_seed{{seed}}.log"
    elif _level == "setting":
        _seeds = sorted({s.seed for s in _first})
        _runs = [t.replace("{seed}", str(seed)) for seed in _seeds for t in _templates]
        _log = f"logs/train/{_exp}/cells_{{setting}}{_suffix}.log"
    else:
        _runs = [s.run for k in _cells for s in CELLS[k]]
        _log = f"logs/train/{_exp}/cells{_suffix}" + ("" if len(_siblings) == 1 else f"_{_index}") + ".log"

    rule:
        name:
            _name if len(_siblings) == 1 else f"{_name}_{_index}"
        input:
            splits=lambda wc, cells_of=_cells_of: [f"data_splits/{key}/split.npz" for key in cells_of(wc)],
            traces=lambda wc, specs_of=_specs_of: sorted(
                {f"data_splits/traces/{s.trace_key}.npz" for s in specs_of(wc)}),
        output:
            metrics=[f"results/{_exp}/{r}/metrics.parquet" for r in _runs],
            info=[f"results/{_exp}/{r}/run.json" for r in _runs],
        log:
            _log,
        wildcard_constraints:
            setting="|".join(sorted({re.escape(s.setting) for s in _first})),
            seed="|".join(sorted({str(s.seed) for s in _first})),
        threads: 1
        params:
            cell=lambda wc, specs_of=_specs_of: specs_to_json(specs_of(wc)),
            code=lambda wc, specs_of=_specs_of: fingerprint(
                "train", tuple(sorted({s.algorithm for s in specs_of(wc)}))),
            versions=installed_versions("train"),  # torch and numpy (hetfl.fingerprint.VERSIONS)
            logs=f"logs/train/{_exp}",
            device=cluster_device(_specs_of),  # cuda when the job gets a GPU
        # cluster placement (workflow/rules/cluster.smk, hetfl.cluster): memory, time limit, GPU, partition
        # and account from the job's scale and the environment; short CPU jobs share one cluster job
        group:
            cluster_group(_specs_of)
        resources:
            **cluster_resources(_specs_of),
        # experiments with larger MLflow mirrors train first (hetfl.scheduling)
        priority: TRAIN_PRIORITY[_exp]
        shell:
            "hetfl train --cell {params.cell:q} --splits-root data_splits --traces-root data_splits"
            " --results-root results --log-dir {params.logs} --threads {threads} --device {params.device}"
            " > {log} 2>&1"
