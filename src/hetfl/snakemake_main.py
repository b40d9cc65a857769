"""`python -m hetfl.snakemake_main ARGS` = `python -m snakemake ARGS`, but the process ends when Snakemake
returns instead of up to a timespan later.

With `--max-jobs-per-timespan` set (make reproduce sets 10000/10s: hetfl.reproduce.LOCAL_JOB_RATE), every
pass of Snakemake's scheduler starts a `threading.Timer` of one timespan that wakes the scheduler again
(snakemake/scheduling/job_scheduler.py, 9.27). The timers are not daemon threads, so after the last job the
interpreter waits for the last of them before it exits: 10 s of every `make reproduce`, while nothing runs.
By then Snakemake has finished every job, written its log and released its lock, and the timers only
release a semaphore nobody waits on, so this ends the process at once with Snakemake's exit status.
"""

from __future__ import annotations

import logging
import os
import sys


def exit_status(code: object) -> int:
    """The status `sys.exit(code)` gives: 0 for None, the number, else 1 (a message, printed to stderr)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    from snakemake.cli import main as snakemake

    try:
        snakemake(sys.argv[1:] if argv is None else argv)
        return 0
    except SystemExit as done:  # how Snakemake's main always ends
        return exit_status(done.code)


if __name__ == "__main__":
    status = main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)  # not sys.exit: that would wait for the scheduler's pending timers
