# MLflow mirrors results/: one job per experiment logs all its runs with one client (a per-run MLflow
# start costs ~2 s, more than a SYNTHETIC run trains), and a summary run with the tables and figures its
# runs feed; the description comes from the config. A change of hetfl.tracking mirrors again (code param).
# `hetfl track` rebuilds the mirror by hand.
rule track:
    input:
        runs=lambda wc: [f"results/{s.experiment}/{s.run}/run.json" for s in RUNS.values()
                         if s.experiment == wc.experiment],
        metrics=lambda wc: metrics_files([f"results/{s.experiment}/{s.run}/run.json" for s in RUNS.values()
                                          if s.experiment == wc.experiment]),
        reports=lambda wc: reports_of_experiment(wc.experiment),
    output:
        "results/{experiment}/mlflow.json",
    log:
        "logs/track/{experiment}.log",
    # one writer of the MLflow store at a time (hetfl.tracking locks it): with `--resources mlflow_store=1`
    # (make reproduce passes it) a mirror waits in Snakemake's queue instead of holding a core while it waits
    resources:
        mlflow_store=1,
    params:
        # --description=... : an empty description (a config without one) must stay an argument
        description=config.get("description", ""),
        code=fingerprint("track"),
        # the store mirrored to (MLFLOW_TRACKING_URI, else results/mlflow.db: hetfl.tracking.tracking_uri):
        # another store gets the mirror made again; mlflow.json names the store
        store=os.environ.get("MLFLOW_TRACKING_URI", ""),
        # --summary takes one file and is repeated; a bare --summary (an experiment without a table): the
        # summary files are none, so --prune removes an earlier summary run
        summary=lambda wc, input: [f"--summary={f}" for f in input.reports] or ["--summary"],
    priority: REPORT_PRIORITY
    shell:
        "hetfl track --prune --results-root results --out {output} --description={params.description:q}"
        " {input.runs} {params.summary:q} > {log} 2>&1"
