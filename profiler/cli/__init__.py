"""The `kvprof` command line: the typer app and its commands, one module per command.

Each command's module parses its options and hands them to the function that does the work
(in analysis/ or the profiler); this package only says which module answers which command.
Heavy imports (vLLM, torch) happen inside the commands that need them, so
`kvprof plan`, `kvprof models` and `kvprof gpus` work on a laptop without either.
Exit codes: 0 success, 2 bad input (one clear line, no traceback), 130 interrupted (Ctrl-C, any command);
`sweep` adds 1 (something failed) and 3 (a results file could not be written), `report` 3.
"""

from __future__ import annotations

# ruff: noqa: E402 (the Ctrl-C guard below comes before the imports it guards)
import os
import signal
import sys
import threading


def _interrupted_while_loading(signum: int, frame: object) -> None:
    """Ctrl-C while the commands' imports load (over a second): nothing is written yet; one line, exit 130."""
    sys.stderr.write("interrupted\n")
    os._exit(130)


# Ctrl-C during the imports below would print an import traceback: until they are done, it just exits
# (where Python's own handler is in place: not in a thread, nor where SIGINT is ignored).
_loading = (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
_sigint = signal.signal(signal.SIGINT, _interrupted_while_loading) if _loading else None

import typer

from profiler.cli import catalog, check_plan, compare, log, plan, probe, procure, recommend, report, sweep, validate
from profiler.cli.common import Commands

if _loading:
    signal.signal(signal.SIGINT, _sigint)

app = typer.Typer(
    name="kvprof",
    help="Empirical KV-cache profiling of vLLM, set against the analytic model.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=Commands,
)

# The commands in the order `kvprof --help` lists them: name, the function that parses its options.
COMMANDS = (
    ("models", catalog.models_cmd),
    ("gpus", catalog.gpus_cmd),
    ("plan", plan.plan_cmd),
    ("procure", procure.procure_cmd),
    ("recommend", recommend.recommend_cmd),
    ("log", log.log_cmd),
    ("report", report.report_cmd),
    ("compare", compare.compare_cmd),
    ("check-plan", check_plan.check_plan_cmd),
    ("probe", probe.probe_cmd),
    ("validate", validate.validate_cmd),
    ("sweep", sweep.sweep_cmd),
)
for _name, _command in COMMANDS:
    app.command(_name)(_command)


def main() -> None:  # pragma: no cover - console entry for `python -m profiler.cli`
    app()
