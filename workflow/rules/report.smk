# What `snakemake --report reports/report.html` bundles (docs/report.md): every table as an HTML page with
# its caption and coloured verdicts, every figure (rule figure), and the fidelity summary the landing page
# (workflow/report/workflow.rst) shows. Categories and subcategories come from hetfl.reports.catalog,
# keyed like the registries, so a table or figure added there appears here without edits.
from hetfl.reports.catalog import category as report_category
from hetfl.reports.catalog import subcategory as report_subcategory
from hetfl.reports.report_pages import base_table

#: every table file the run writes: <table> and <table>_readings
REPORT_TABLES = sorted(TABLES) + [f"{t}_readings" for t in READINGS_TABLES]
FIDELITY_CATEGORY = "Fidelity summary"


rule report_table:
    input:
        md="reports/tables/{name}.md",
        csv="reports/tables/{name}.csv",
    output:
        html=report(
            "reports/report/tables/{name}.html",
            caption="../report/table.rst",
            category=lambda wc: report_category(base_table(wc.name)),
            subcategory=lambda wc: report_subcategory(base_table(wc.name)),
        ),
        caption="reports/report/tables/{name}.caption.html",
    log:
        "logs/report/{name}.log",
    wildcard_constraints:
        name="|".join(REPORT_TABLES) or "none",
    params:
        code=fingerprint("report"),
    priority: REPORT_PRIORITY
    shell:
        "hetfl report tables {wildcards.name} --out reports/report/tables > {log} 2>&1"


rule fidelity_summary:
    input:
        csv=expand("reports/tables/{name}.csv", name=REPORT_TABLES),
    output:
        html=report("reports/report/fidelity.html", caption="../report/fidelity.rst",
                    category=FIDELITY_CATEGORY, subcategory=FIDELITY_CATEGORY),
        caption="reports/report/fidelity.caption.html",
    log:
        "logs/report/fidelity.log",
    params:
        code=fingerprint("report"),
        tables=" ".join(REPORT_TABLES),
    priority: REPORT_PRIORITY
    shell:
        "hetfl report fidelity {params.tables} --out reports/report/fidelity > {log} 2>&1"

