# The splits of an experiment whose source is small run on the submitting host (rule split, a localrule);
# those of a large source are cluster jobs (rule split_large) with the memory their source needs
# (workflow/rules/cluster.smk, hetfl.cluster.split_on_cluster). Both write the same files the same way.
SPLIT_SHELL = (
    "hetfl split --spec {params.spec:q} --seed {wildcards.seed} --out {output.npz}"
    " --config-key experiments.{wildcards.experiment}.settings.{wildcards.setting} > {log} 2>&1"
)


rule split:
    output:
        npz="data_splits/{experiment}/{setting}/seed{seed}/split.npz",
        manifest="data_splits/{experiment}/{setting}/seed{seed}/manifest.json",
    log:
        "logs/split/{experiment}/{setting}/seed{seed}.log",
    wildcard_constraints:
        experiment=alternatives(SPLIT_LOCAL),
    params:
        spec=split_spec_json,
        code=fingerprint("split"),
        versions=installed_versions("split"),
    # a priority is not passed on to a job's inputs: without their own, splits waited behind training
    priority: REPORT_PRIORITY
    shell:
        SPLIT_SHELL


rule split_large:
    output:
        npz="data_splits/{experiment}/{setting}/seed{seed}/split.npz",
        manifest="data_splits/{experiment}/{setting}/seed{seed}/manifest.json",
    log:
        "logs/split/{experiment}/{setting}/seed{seed}.log",
    wildcard_constraints:
        experiment=alternatives(SPLIT_LARGE),
    params:
        spec=split_spec_json,
        code=fingerprint("split"),
        versions=installed_versions("split"),
    threads: 1
    resources:
        **split_job_resources(),
    priority: REPORT_PRIORITY
    shell:
        SPLIT_SHELL


rule trace:
    output:
        npz="data_splits/traces/{traceset}/n{n}_r{r}_seed{seed}{opts}.npz",
        csv="data_splits/traces/{traceset}/n{n}_r{r}_seed{seed}{opts}.csv",
    log:
        "logs/trace/{traceset}/n{n}_r{r}_seed{seed}{opts}.log",
    params:
        assignment=trace_assignment,
        p_inactive=trace_p_inactive,
        code=fingerprint("trace"),
        versions=trace_versions,
    priority: REPORT_PRIORITY
    shell:
        "hetfl trace --traceset {wildcards.traceset} --num-devices {wildcards.n} --rounds {wildcards.r}"
        " --seed {wildcards.seed} --assignment {params.assignment} --p-inactive {params.p_inactive}"
        " --out {output.npz} > {log} 2>&1"
