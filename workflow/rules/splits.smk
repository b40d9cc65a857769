rule split:
    output:
        npz="data_splits/{experiment}/{setting}/seed{seed}/split.npz",
        manifest="data_splits/{experiment}/{setting}/seed{seed}/manifest.json",
    log:
        "logs/split/{experiment}/{setting}/seed{seed}.log",
    params:
        spec=split_spec_json,
        code=fingerprint("split"),
    # a priority is not passed on to a job's inputs: without their own, splits waited behind training
    priority: REPORT_PRIORITY
    shell:
        "hetfl split --spec {params.spec:q} --seed {wildcards.seed} --out {output.npz}"
        " --config-key experiments.{wildcards.experiment}.settings.{wildcards.setting} > {log} 2>&1"


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
    priority: REPORT_PRIORITY
    shell:
        "hetfl trace --traceset {wildcards.traceset} --num-devices {wildcards.n} --rounds {wildcards.r}"
        " --seed {wildcards.seed} --assignment {params.assignment} --p-inactive {params.p_inactive}"
        " --out {output.npz} > {log} 2>&1"
