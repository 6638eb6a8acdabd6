"""`kvprof compare`: several sweeps side by side, or a saved plan against a measured sweep."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from profiler.cli.check_plan import run_check_plan
from profiler.cli.common import (
    console,
    fail,
    output_path,
    warn,
)


def compare_cmd(
    inputs: Annotated[list[Path], typer.Argument(
        metavar="DIR_A DIR_B [DIR_C …] | PLAN.json DIR", help="Results directories, or a saved plan and one.")],
    labels: Annotated[str | None, typer.Option("--labels", help="Comma-separated run names.")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Where compare.pdf/compare.md go.")] = None,
    pdf: Annotated[Path | None, typer.Option("--pdf", help="PDF path (default OUT/compare.pdf).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
):
    """Several sweeps side by side — or a saved plan against what was measured."""
    if len(inputs) == 2 and inputs[0].is_file():
        run_check_plan(inputs[0], inputs[1], json_out)
        return
    from analysis.measured.comparison import CompareError, compare_runs
    from analysis.report.comparison import build_comparison
    from analysis.results.load import results_warnings
    from profiler.output_paths import OutputPathError, output_dir, safe_name, writing

    names = [x.strip() for x in labels.split(",")] if labels is not None else None
    if names is not None and not all(names):
        raise fail(f"--labels {labels!r}: a name is empty; give one non-empty name per run, comma-separated")
    try:
        for name in names or [Path(d).name for d in inputs]:  # labels become the default output directory's name
            safe_name(name, "--labels" if names else "a results directory's name (give --labels)")
        if out is not None and out.exists():  # a file, or a directory that cannot be written: say so before the work
            output_dir(out, "--out", results_dirs=tuple(inputs))
        if pdf is not None:
            output_path(pdf, "--pdf", results_dirs=tuple(inputs), inputs=tuple(inputs))
        with results_warnings(warn):
            cmp = compare_runs(inputs, names)
            reports = Path("reports")
            target = out or reports / ("compare-" + "-vs-".join(r.label for r in cmp.runs))
            output_dir(target, "--out", results_dirs=tuple(inputs), within=None if out else reports)
            with writing(target, "--out"):
                written = build_comparison(cmp, target, pdf)
    except (CompareError, OutputPathError) as exc:
        raise fail(str(exc)) from None
    if json_out:
        print(json.dumps({"verdict": cmp.verdict, "align_on": cmp.align_on,
                          "differing_axes": {k: [list(map(str, v)) for v in vals]
                                             for k, vals in cmp.differing_axes.items()},
                          "differing_facts": cmp.differing_facts,
                          "capacity": json.loads(cmp.capacity.to_json(orient="records")),
                          "serve": json.loads(cmp.serve.to_json(orient="records")),
                          "files": {k: str(v) for k, v in written.items()}}))
        return
    for line in cmp.verdict:
        console.print(line, highlight=False)
    console.print(f"written: {written['pdf']}  {written['markdown']}", highlight=False)
