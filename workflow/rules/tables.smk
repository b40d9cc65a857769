rule table:
    input:
        runs=lambda wc: runs_of_table(wc.table),
    output:
        md="reports/tables/{table}.md",
        csv="reports/tables/{table}.csv",
        tex="reports/tables/{table}.tex",
    log:
        "logs/tables/{table}.log",
    wildcard_constraints:
        table="|".join(TABLE_BUILDERS),
    shell:
        "hetfl table {wildcards.table} --out reports/tables/{wildcards.table} {input.runs} > {log} 2>&1"


rule figure:
    input:
        runs=lambda wc: runs_of_table(FIGURES[wc.figure]),
    output:
        png="reports/figures/{figure}.png",
        svg="reports/figures/{figure}.svg",
    log:
        "logs/figures/{figure}.log",
    wildcard_constraints:
        figure="|".join(FIGURES) or "none",
    shell:
        "hetfl figure {wildcards.figure} --out reports/figures/{wildcards.figure} {input.runs} > {log} 2>&1"
