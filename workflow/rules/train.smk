rule train:
    input:
        unpack(train_inputs),
    output:
        metrics="results/{experiment}/{run}/metrics.parquet",
        info="results/{experiment}/{run}/run.json",
    log:
        "logs/train/{experiment}/{run}.log",
    threads: 1
    params:
        spec=lambda wc: json.dumps(spec_of(wc).to_dict(), sort_keys=True),
        out="results/{experiment}/{run}",
        device=cluster_device(train_specs),  # cluster.smk: cuda when the job is given a GPU
    # cluster placement (workflow/rules/cluster.smk, hetfl.cluster): memory, time limit, GPU, partition
    # and account from the runs' scale and the environment; short CPU jobs share one cluster job
    group:
        cluster_group(train_specs)
    resources:
        **cluster_resources(train_specs),
    shell:
        "hetfl train --spec {params.spec:q} --split {input.split} --traces {input.traces}"
        " --out {params.out} --threads {threads} --device {params.device} --no-mlflow > {log} 2>&1"
