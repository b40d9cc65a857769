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
    shell:
        "hetfl train --spec {params.spec:q} --split {input.split} --traces {input.traces}"
        " --out {params.out} --threads {threads} --no-mlflow > {log} 2>&1"
