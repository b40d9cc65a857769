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
        device=train_device_of,  # cluster.smk: cuda when the job is given a GPU
    # cluster placement (workflow/rules/cluster.smk, hetfl.cluster): memory, time limit, GPU, partition
    # and account from the runs' scale and the environment; short CPU jobs share one cluster job
    group:
        train_group_of
    resources:
        **TRAIN_RESOURCES,
    shell:
        "hetfl train --spec {params.spec:q} --split {input.split} --traces {input.traces}"
        " --out {params.out} --threads {threads} --device {params.device} --no-mlflow > {log} 2>&1"
