"""What `kvprof validate` and `kvprof sweep` share: the spec checked (every problem, exit 2), the grid caps
as options, and the dropped combinations as lines."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from profiler.cli.common import (
    EXIT_BAD_INPUT,
    err,
)


def validated(spec_path: Path, platform: str | None = None, limits: Any = None) -> tuple[Any, Any]:
    """The spec and its plan, or every problem on stderr and exit 2 (nothing started). ``limits``: the
    grid caps (profiler.spec.GridLimits; default its defaults)."""
    from profiler.preflight import validate
    from profiler.spec import GridLimits, SpecError, grid_limits

    try:
        with grid_limits(limits or GridLimits()):
            return validate(spec_path, platform)
    except SpecError as exc:
        for line in str(exc).splitlines():
            err.print(f"[bold red]error:[/] {escape(line)}", highlight=False)
        raise typer.Exit(EXIT_BAD_INPUT) from None


def dropped_lines(dropped: list[Any], verbose: bool, indent: str = "") -> list[str]:
    """Each dropped combination on a line (with -v, or when there are few), else a count per kind of reason
    with an example of each; the manifest records every one either way."""
    from profiler.spec import DROPPED_LISTED, dropped_summary

    s = dropped_summary(dropped, verbose)
    if s["dropped_complete"]:
        return [f"{indent}dropped {d.engine_id} {d.what}: {d.reason}" for d in dropped]
    lines = [f"{indent}{len(dropped):,} combinations dropped, by reason (-v lists each; a sweep's manifest "
             f"records each):"]
    kinds = list(s["dropped_by_reason"].items())
    for (kind, n), d in zip(kinds[:DROPPED_LISTED], s["dropped"], strict=False):
        lines.append(f"{indent}  {n:,} × {kind}; e.g. {d.engine_id} {d.what}: {d.reason}")
    if len(kinds) > DROPPED_LISTED:
        lines.append(f"{indent}  … {len(kinds) - DROPPED_LISTED:,} more kinds of reason "
                     f"({sum(n for _, n in kinds[DROPPED_LISTED:]):,} combinations)")
    return lines


def limits(max_engines: int | None, max_points: int | None) -> Any:
    from profiler.spec import GridLimits

    given = {k: v for k, v in (("max_engines", max_engines), ("max_points", max_points)) if v is not None}
    return GridLimits(**given)


MaxEngines = Annotated[int | None, typer.Option(
    "--max-engines", min=1, help="Allow a grid of up to N engine launches (default 10,000: start-ups alone "
                                 "take days). The sizes are counted from the spec's axes before anything is "
                                 "expanded; a spec over the cap is refused with its axes and the N it needs.")]
MaxPoints = Annotated[int | None, typer.Option(
    "--max-points", min=1, help="Allow a grid of up to N points, counted before the combinations that do not "
                                "fit are dropped (default 100,000: about a week of measuring).")]
Verbose = Annotated[bool, typer.Option(
    "--verbose", "-v", help="List every dropped combination (default: a count per reason, with examples, "
                            "when there are more than 10); with --dry-run also every engine, flagged point "
                            "and, in --json, every point.")]
