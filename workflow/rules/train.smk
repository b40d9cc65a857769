# One job per cell (the runs sharing a split), one rule per group of cells whose runs have the same names up
# to (setting, seed) — usually one rule per experiment. `hetfl train --cell` trains the cell's runs in one
# process, checkpoints every 20 rounds, and restores finished runs from their checkpoints when Snakemake
# reruns a killed job. The code param reruns a cell when the code it runs changes (hetfl.fingerprint;
# Snakemake's params rerun trigger).


from functools import partial


# The train jobs of a cell train the runs specs_of(wildcards), which share a split; from them come each job's
# resources (`resources: **cluster_resources(specs_of)`), group and `hetfl train --device`.
def cluster_resources(specs_of):
    return {name: (lambda wc, attempt, name=name: train_resources(specs_of(wc), CLUSTER, attempt)[name])
            for name in resource_names(CLUSTER)}


def cluster_group(specs_of):
    return lambda wc: train_group(specs_of(wc), CLUSTER)


def cluster_device(specs_of):
    return lambda wc: train_device(specs_of(wc), CLUSTER)


def cell_specs(exp, suffix, wc):
    return CELLS[f"{exp}/{wc.setting}{suffix}/seed{wc.seed}"]


_GROUPS = train_groups()
for _exp, _suffix, _templates, _cells in _GROUPS:
    _first = [CELLS[k][0] for k in _cells]
    _siblings = [g for g in _GROUPS if g[0] == _exp]
    _name = re.sub(r"[^A-Za-z0-9_]", "_", f"train_{_exp}")

    rule:
        name:
            _name if len(_siblings) == 1 else f"{_name}_{_siblings.index((_exp, _suffix, _templates, _cells))}"
        input:
            split=f"data_splits/{_exp}/{{setting}}{_suffix}/seed{{seed}}/split.npz",
            traces=lambda wc, exp=_exp, suffix=_suffix: sorted(
                {f"data_splits/traces/{s.trace_key}.npz" for s in cell_specs(exp, suffix, wc)}),
        output:
            metrics=[f"results/{_exp}/{t}/metrics.parquet" for t in _templates],
            info=[f"results/{_exp}/{t}/run.json" for t in _templates],
        log:
            f"logs/train/{_exp}/cell_{{setting}}{_suffix}_seed{{seed}}.log",
        wildcard_constraints:
            setting="|".join(sorted({re.escape(s.setting) for s in _first})),
            seed="|".join(sorted({str(s.seed) for s in _first})),
        threads: 1
        params:
            cell=lambda wc, exp=_exp, suffix=_suffix: json.dumps(
                [s.to_dict() for s in cell_specs(exp, suffix, wc)], sort_keys=True),
            code=lambda wc, exp=_exp, suffix=_suffix: fingerprint(
                "train", tuple(sorted({s.algorithm for s in cell_specs(exp, suffix, wc)}))),
            logs=f"logs/train/{_exp}",
            device=cluster_device(partial(cell_specs, _exp, _suffix)),  # cuda when the job gets a GPU
        # cluster placement (workflow/rules/cluster.smk, hetfl.cluster): memory, time limit, GPU, partition
        # and account from the cell's scale and the environment; short CPU jobs share one cluster job
        group:
            cluster_group(partial(cell_specs, _exp, _suffix))
        resources:
            **cluster_resources(partial(cell_specs, _exp, _suffix)),
        # experiments with larger MLflow mirrors train first (hetfl.scheduling)
        priority: TRAIN_PRIORITY[_exp]
        shell:
            "hetfl train --cell {params.cell:q} --split {input.split} --traces-root data_splits"
            " --results-root results --log-dir {params.logs} --threads {threads} --device {params.device}"
            " > {log} 2>&1"
