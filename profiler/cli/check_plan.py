"""`kvprof check-plan`: a saved plan held against the sweep that measured it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from profiler.cli.common import (
    console,
    fail,
    warn,
)


def run_check_plan(plan_path: Path, results_dir: Path, json_out: bool) -> None:
    from analysis.measured.plan_check import PlanCheckError, check_plan, plan_check_markdown
    from analysis.results.load import results_warnings

    try:
        with results_warnings(warn):
            df = check_plan(plan_path, results_dir)
    except PlanCheckError as exc:
        raise fail(str(exc)) from None
    if json_out:
        print(df.to_json(orient="records"))
        return
    console.print(plan_check_markdown(df, plan_path, results_dir), highlight=False)


def check_plan_cmd(
    plan_path: Annotated[Path, typer.Argument(metavar="PLAN.json", help="Written by `kvprof plan … --save`.")],
    results_dir: Annotated[Path, typer.Argument(metavar="DIR", help="The sweep that measured it.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
):
    """Hold a saved plan against a measured sweep: predicted vs measured, per quantity."""
    run_check_plan(plan_path, results_dir, json_out)
