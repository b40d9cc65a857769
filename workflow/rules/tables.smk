rule table_accuracy_difference:
    input:
        runs=runs_of_table("accuracy_difference"),
    output:
        md="reports/tables/accuracy_difference.md",
        csv="reports/tables/accuracy_difference.csv",
        tex="reports/tables/accuracy_difference.tex",
    log:
        "logs/tables/accuracy_difference.log",
    shell:
        "hetfl table accuracy_difference --out reports/tables/accuracy_difference {input.runs} > {log} 2>&1"
