# MLflow mirrors results/: one job per experiment logs all its runs with one client (a per-run MLflow
# start costs ~2 s, more than a SYNTHETIC run trains). `hetfl track` rebuilds the mirror by hand.
rule track:
    input:
        runs=lambda wc: [f"results/{s.experiment}/{s.run}/run.json" for s in RUNS.values()
                         if s.experiment == wc.experiment],
    output:
        "results/{experiment}/mlflow.json",
    log:
        "logs/track/{experiment}.log",
    shell:
        "hetfl track --results-root results --out {output} {input.runs} > {log} 2>&1"
