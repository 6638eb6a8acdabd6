"""`kvprof report`: a results directory → report.pdf, summary.md, results.parquet, calibration.json."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from profiler.cli.common import (
    EXIT_WRITE_FAILED,
    console,
    err,
    fail,
    output_path,
    warn,
)


@contextlib.contextmanager
def locked_for_report(results_dir: Path) -> Iterator[None]:
    """Hold the results directory's lock while a report reads it (StoreError names a sweep still writing
    it); a read-only directory without a lock file is read unlocked (ResultsDir.lock_to_read says why)."""
    from profiler.store import ResultsDir

    store = ResultsDir(results_dir)
    if results_dir.is_dir():
        store.lock_to_read("report")
    try:
        yield
    finally:
        store.unlock()


def _report_target(results_dir: Path, out_dir: Path | None) -> Path:
    """Where summary.md, results.parquet, calibration.json (and report.pdf by default) go: ``out_dir``, made
    if missing, or the results directory; the one-line error (exit 2) when it cannot be written."""
    from profiler.output_paths import OutputPathError, output_dir, unwritable_reason

    if not results_dir.is_dir():
        return out_dir or results_dir  # the load says what is wrong with it, before anything is made
    if out_dir is not None:
        try:
            return output_dir(out_dir, "--out-dir", results_dirs=(results_dir,))
        except OutputPathError as exc:
            raise fail(str(exc)) from None
    why = unwritable_reason(results_dir)
    if why:
        raise fail(f"{results_dir} is not writable ({why}); write the report elsewhere with --out-dir DIR")
    return results_dir


def report_cmd(
    results_dir: Annotated[Path, typer.Argument(metavar="DIR", help="A sweep's results directory.")],
    pdf: Annotated[Path | None, typer.Option(
        "--pdf", help="Where to write the PDF (default: report.pdf in --out-dir, or in DIR).")] = None,
    out_dir: Annotated[Path | None, typer.Option(
        "--out-dir", help="Write report.pdf, summary.md, results.parquet and calibration.json here instead of "
                          "DIR (made if missing): for a read-only archive.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the written paths and headline as JSON.")] = False,
    fit_flagged: Annotated[bool, typer.Option(
        "--fit-flagged", help="Fit decode points flagged as noisy (steps spread over half their median) or "
                              "contended (other processes on the cores or the GPU) too; by default they are drawn "
                              "hollow and left out of the fit.")] = False,
):
    """Build report.pdf, summary.md, results.parquet and calibration.json from a results directory.

    Each file appears whole or not at all (written beside, then renamed); a calibration.json left by an
    earlier report is removed when this one has no decode fit. The directory's lock is held meanwhile:
    a sweep still writing it is named and the report refused (exit 2). A read-only DIR is read without
    the lock when it has no lock file (no sweep can be writing it): give --out-dir.
    Exit codes: 0 written, 2 bad input, 3 a file could not be written, 130 interrupted.
    """
    from analysis.report.run import build_report
    from analysis.results.load import LoadError, results_warnings
    from profiler.store import StoreError

    target = _report_target(results_dir, out_dir)
    if pdf is not None:
        output_path(pdf, "--pdf", results_dirs=(results_dir,))
    try:
        with locked_for_report(results_dir), results_warnings(warn):
            written = build_report(results_dir, pdf, out_dir=target, include_flagged=fit_flagged)
    except (LoadError, StoreError) as exc:
        raise fail(str(exc)) from None
    except OSError as exc:
        err.print(f"[bold red]error:[/] {escape(f'cannot write {exc.filename or target}: {exc.strerror or exc}')}",
                  highlight=False)
        raise typer.Exit(EXIT_WRITE_FAILED) from None
    if json_out:
        print(json.dumps({k: str(v) for k, v in written.items()}))
        return
    for kind, path in written.items():
        if kind == "calibration_removed":
            console.print(f"removed {path}: this report has no decode fit to calibrate `kvprof plan` with",
                          highlight=False, soft_wrap=True)
        else:
            console.print(f"{kind}: {path}", highlight=False)
