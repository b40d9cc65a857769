rule table:
    input:
        runs=lambda wc: runs_of_table(wc.table),
        metrics=lambda wc: metrics_files(runs_of_table(wc.table)),
    output:
        md="reports/tables/{table}.md",
        csv="reports/tables/{table}.csv",
        tex="reports/tables/{table}.tex",
    log:
        "logs/tables/{table}.log",
    wildcard_constraints:
        table="|".join(TABLE_BUILDERS),
    params:
        code=lambda wc: fingerprint("table", job=wc.table),
        references=table_references,
        labels=lambda wc: method_labels(wc.table),
    priority: REPORT_PRIORITY
    shell:
        "hetfl table {wildcards.table} --out reports/tables/{wildcards.table} {input.runs} > {log} 2>&1"


# Every cell under every reading of the experiments' readings axis (docs/readings.md).
rule table_readings:
    input:
        runs=lambda wc: runs_of_table(wc.table, None),
        metrics=lambda wc: metrics_files(runs_of_table(wc.table, None)),
    output:
        md="reports/tables/{table}_readings.md",
        csv="reports/tables/{table}_readings.csv",
    log:
        "logs/tables/{table}_readings.log",
    wildcard_constraints:
        table="|".join(TABLE_BUILDERS),
    params:
        code=lambda wc: fingerprint("table", job=wc.table),
        references=table_references,
        labels=lambda wc: method_labels(wc.table),
    priority: REPORT_PRIORITY
    shell:
        "hetfl table {wildcards.table} --readings --out reports/tables/{wildcards.table}_readings {input.runs}"
        " > {log} 2>&1"


rule figure:
    input:
        runs=lambda wc: runs_of_table(FIGURES[wc.figure]),
        metrics=lambda wc: metrics_files(runs_of_table(FIGURES[wc.figure])),
    output:
        png=report(
            "reports/figures/{figure}.png",
            caption="../report/figure.rst",
            category=lambda wc: report_category(FIGURES[wc.figure]),
            subcategory=lambda wc: report_subcategory(FIGURES[wc.figure]),
        ),
        svg="reports/figures/{figure}.svg",
        caption="reports/figures/{figure}.caption.html",
    log:
        "logs/figures/{figure}.log",
    wildcard_constraints:
        figure="|".join(FIGURES) or "none",
    params:
        code=lambda wc: fingerprint("figure", job=wc.figure),
        labels=lambda wc: method_labels(FIGURES[wc.figure]),
    priority: REPORT_PRIORITY
    shell:
        "hetfl figure {wildcards.figure} --out reports/figures/{wildcards.figure} {input.runs} > {log} 2>&1"


# The client × class label distribution of an experiment's splits (a panel per setting, first seed), filed
# in the report under the paper of the experiment's table, subcategory "Data splits" (docs/report.md).
rule split_figure:
    input:
        manifests=lambda wc: SPLIT_CHARTS[wc.experiment],
    output:
        png=report(
            "reports/figures/splits/{experiment}.png",
            caption="../report/split_figure.rst",
            category=lambda wc: report_category(experiment_table(wc.experiment)),
            subcategory=SPLITS_SUBCATEGORY,
        ),
        caption="reports/figures/splits/{experiment}.caption.html",
    log:
        "logs/figures/splits/{experiment}.log",
    wildcard_constraints:
        experiment="|".join(map(re.escape, SPLIT_CHARTS)) or "none",
    params:
        code=fingerprint("split_figure"),
    priority: REPORT_PRIORITY
    shell:
        "hetfl split-figure --out reports/figures/splits/{wildcards.experiment} {input.manifests} > {log} 2>&1"
