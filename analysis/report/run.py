"""The single-run report: its pages, registered in order in ``PAGES``, and ``build_report``, which walks them
into report.pdf and summary.md (and writes results.parquet and calibration.json); the analysis is
analysis.measured.pipeline.

Page one answers: sequences that fit per engine and length, decode step and TPOT per batch, the largest
divergences, and one figure. Plot titles state the finding; axes carry units; every engine has one short
label and one colour on every page (analysis.report.style); a table shares its page with the plot it explains.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analysis.measured.pipeline import (
    Analysis,
    analyse,
    calibration,
    results_table,
)
from analysis.report.pages.answer import answer_markdown, answer_page
from analysis.report.pages.capacity import (
    budget_page,
    capacity_page,
    ceiling_page,
    power_timeline_pages,
    timeline_pages,
)
from analysis.report.pages.common import analysis_table, no_markdown
from analysis.report.pages.decode import bandwidth_page, decode_page, fit_markdown, settings_page, throughput_page
from analysis.report.pages.energy import energy_markdown, energy_page
from analysis.report.pages.serve import (
    frontier_markdown,
    frontier_page,
    serve_capacity_markdown,
    serve_capacity_page,
    serve_load_markdown,
    serve_load_page,
    served_vs_offline_markdown,
    served_vs_offline_page,
)
from analysis.report.pages.setup import environment_table, setup_markdown, setup_page
from analysis.report.pdf import (
    Pages,
    atomic_pdf,
    table_page,
)
from analysis.results.load import load
from analysis.results.schema import atomic_write_bytes


@dataclass(frozen=True)
class ReportPage:
    """One entry of the report. ``render`` draws its page(s) into report.pdf (a ``Pages``: ``savefig`` for a
    figure page, ``table_page`` for a table), or nothing when the run has no data for it; ``markdown`` returns
    its sections of summary.md (none for a figure)."""

    name: str
    render: Callable[[Any, Analysis], None]
    markdown: Callable[[Analysis], list[str]] = no_markdown


def _table_entry(key: str, *, in_pdf_when_empty: bool = True) -> ReportPage:
    """The page of the analysis table ``a.tables[key]`` (set beneath the tables before it where there is room);
    nothing where the analysis built no such table."""

    def render(pdf: Any, a: Analysis) -> None:
        table = analysis_table(a, key)
        if table is not None and (in_pdf_when_empty or not table.frame.empty):
            table_page(pdf, table)

    def markdown(a: Analysis) -> list[str]:
        table = analysis_table(a, key)
        return [table.markdown()] if table is not None else []

    return ReportPage(key, render, markdown)


def _with_tables(name: str, render: Callable[[Any, Analysis], None], *keys: str,
                 markdown: Callable[[Analysis], list[str]] | None = None) -> ReportPage:
    """A page that draws a plot with the tables ``keys`` it explains; summary.md gets those tables."""

    def md(a: Analysis) -> list[str]:
        out = markdown(a) if markdown is not None else []
        return out + [t.markdown() for k in keys if (t := analysis_table(a, k)) is not None]

    return ReportPage(name, render, md)


# The report, in order: build_report walks this list for report.pdf and for summary.md, so a new page is
# one function registered here.
PAGES: list[ReportPage] = [
    ReportPage("answer", answer_page, answer_markdown),
    ReportPage("setup", setup_page, setup_markdown),
    _with_tables("capacity", capacity_page, "capacity"),
    _with_tables("budget", budget_page, "budget"),
    ReportPage("memory timeline", timeline_pages),
    _with_tables("ceiling", ceiling_page, "ceiling", "rounding"),
    ReportPage("throughput plot", throughput_page),
    ReportPage("decode plot", decode_page, fit_markdown),
    _table_entry("crossover"),
    _table_entry("decode"),
    ReportPage("bandwidth plot", bandwidth_page),
    _with_tables("settings plot", settings_page, "kv_dtype"),
    # serve mode: each page only where the run has serve points
    ReportPage("served vs offline", served_vs_offline_page, served_vs_offline_markdown),
    ReportPage("serve latency vs load", serve_load_page, serve_load_markdown),
    ReportPage("serve frontier", frontier_page, frontier_markdown),
    ReportPage("serve capacity", serve_capacity_page, serve_capacity_markdown),
    _table_entry("serve_goodput"),
    _table_entry("serve_prefix"),
    ReportPage("energy", energy_page, energy_markdown),  # only where the run measured energy
    ReportPage("power timeline", power_timeline_pages),  # only where NVML gave power
    _table_entry("claims"),
    _table_entry("divergences"),
    ReportPage("environment", lambda pdf, a: table_page(pdf, environment_table(a)),
               lambda a: [environment_table(a).markdown()]),
    _table_entry("failed", in_pdf_when_empty=False),  # the PDF lists failures only when there are some
]


def build_report(results_dir: str | Path, pdf_path: str | Path | None = None,
                 out_dir: str | Path | None = None, include_flagged: bool = False) -> dict[str, Path]:
    """Write report.pdf, summary.md (both from PAGES), results.parquet and calibration.json into ``out_dir``
    (default: the results directory; ``pdf_path`` moves the PDF); return their paths.

    Each file is written beside its place and renamed into it, so an interrupted or failed report leaves
    every earlier file whole. The three small files are prepared before the PDF is drawn and written
    after it, so they and the PDF come from one analysis. A calibration.json there from an earlier
    report is removed when this analysis has no decode fit (returned as ``calibration_removed``): a
    stale one would still feed ``kvprof plan --calibration``. Noisy or contended decode points are drawn
    hollow and left out of the fit unless ``include_flagged``.
    """
    res = load(results_dir)
    a = analyse(res, include_flagged)
    out = Path(out_dir) if out_dir is not None else Path(results_dir)
    pdf_path = Path(pdf_path) if pdf_path else out / "report.pdf"
    summary = "\n".join(part for page in PAGES for part in page.markdown(a)).encode()
    buf = io.BytesIO()
    results_table(a).to_parquet(buf, index=False)
    cal = (json.dumps(calibration(a), indent=2) + "\n").encode() if a.fit is not None else None
    with atomic_pdf(pdf_path) as raw:
        pdf = Pages(raw)  # tables flow beneath one another; a figure page starts a page of its own
        for page in PAGES:
            page.render(pdf, a)
        pdf.flush()
        info = raw.infodict()
        info["Title"] = f"kvprof report {res.manifest.get('name')}"
        info["Subject"] = "KV-cache theory vs vLLM measurements"
    written = {"pdf": pdf_path, "summary": out / "summary.md", "results": out / "results.parquet"}
    atomic_write_bytes(written["summary"], summary)
    atomic_write_bytes(written["results"], buf.getvalue())
    calibration_path = out / "calibration.json"
    if cal is not None:
        written["calibration"] = calibration_path
        atomic_write_bytes(calibration_path, cal)
    elif calibration_path.exists():
        calibration_path.unlink()
        written["calibration_removed"] = calibration_path
    return written
