"""The energy page (issue #29): joules per output token against the batch, per engine, with the table."""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
from matplotlib.lines import Line2D

from analysis.measured.pipeline import Analysis, energy_headline
from analysis.report.pages.common import (
    analysis_table,
    draw_series,
    engine_handles,
    format_axes,
    plot_axes,
    plot_legend,
    style_of,
    wrap_title,
)
from analysis.report.pdf import plot_with_table

MARKERS = {"decode": "-o", "saturation": "-^", "serve": "--s"}


def _draw(fig: plt.Figure, rect: tuple, a: Analysis) -> None:
    st = style_of(a)
    e = a.energy[a.energy["j_per_output_token"].notna() & a.energy["concurrency"].notna()]
    (ax,) = plot_axes(fig, rect, 1)
    for (eid, phase), g in e.sort_values("concurrency").groupby(["engine_id", "phase"]):
        draw_series(ax, g["concurrency"], g["j_per_output_token"], MARKERS.get(phase, "-o"), color=st.color(eid),
                    ms=4, gid=st.gid(eid))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch: requests decoded together (serve: the most in flight)")
    ax.set_ylabel("J per output token (the point's whole window)")
    format_axes(ax)
    phases = [Line2D([], [], color="black", ls=m[:-1] or "-", marker=m[-1], label=p)
              for p, m in MARKERS.items() if p in set(e["phase"])]
    plot_legend(fig, rect, [*engine_handles(st, e["engine_id"]), *phases])


def energy_page(pdf: Any, a: Analysis) -> None:
    """Only where the run measured energy; page one says why where it did not."""
    t = analysis_table(a, "energy")
    if t is None or a.energy["j_per_output_token"].notna().sum() == 0:
        return
    plot_with_table(pdf, wrap_title(energy_headline(a)), t, lambda fig, rect: _draw(fig, rect, a),
                    max_table_share=0.45)


def energy_markdown(a: Analysis) -> list[str]:
    t = analysis_table(a, "energy")
    return [f"{energy_headline(a)}\n"] + ([t.markdown()] if t is not None else [])
