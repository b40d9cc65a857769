# hetfl: regenerate the papers' tables and figures.  `snakemake --cores N [--configfile FILE]`
from snakemake.utils import min_version

min_version("9.0")


# The embedded default applies only when no --configfile is given: Snakemake would otherwise merge it
# into the user's config and run both grids.
if not config:

    configfile: "workflow/config/quick.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/cluster.smk"
include: "workflow/rules/splits.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/tables.smk"
include: "workflow/rules/track.smk"
include: "workflow/rules/report.smk"


# the landing page of `snakemake --report reports/report.html` (docs/report.md)
report: "workflow/report/workflow.rst"


rule all:
    input:
        all_targets(),
        report_targets(),
    default_target: True
