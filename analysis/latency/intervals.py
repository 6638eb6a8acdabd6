"""A latency prediction's interval: published runs' measured ÷ predicted over a regime, its 10th–90th percentiles
widened until they hold the share ``HELD_OUT_COVERAGE`` of an unseen campaign's figures (:func:`held_out_interval`),
and the words a plan prints for it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field


class Interval(BaseModel):
    """Measured ÷ predicted over the corpus records of one regime, each predicted by a fit that did not see
    its source (leave-one-source-out): the interval a prediction of that regime carries."""

    model_config = ConfigDict(extra="forbid")

    n: int
    sources: int
    median_ratio: float
    low_ratio: float = Field(description="the interval's low end: the 10th percentile of measured ÷ predicted, "
                                         "widened (``widening``) to hold unseen campaigns' figures")
    high_ratio: float = Field(description="its high end: the 90th percentile, widened alike")
    median_abs_error: float = Field(description="median |measured ÷ predicted − 1|")
    p10_ratio: float | None = Field(None, description="10th percentile of measured ÷ predicted")
    p90_ratio: float | None = Field(None, description="90th percentile of measured ÷ predicted")
    widening: float = Field(1.0, ge=1.0, description="how many times farther from the median (in log space) the "
                                                      "ends sit than the 10th and 90th percentiles")
    held_out_coverage: float | None = Field(
        None, description="the share of the regime's figures inside the interval built, at that widening, "
                          "without their own campaign (None: a single campaign, nothing to hold out)")


HELD_OUT_COVERAGE = 0.8  # the share of an unseen campaign's figures an interval is widened to hold
# What a shipped range is, in the words the plan's tables print beside it.
INTERVAL_MEANING = "published runs' measured ÷ predicted, 10th–90th pct widened to hold 80% of an unseen campaign's"
_WIDENINGS = np.round(np.arange(1.0, 4.0001, 0.05), 2)


def _percentile_range(ratios: np.ndarray, widening: float = 1.0) -> tuple[float, float]:
    """The 10th–90th percentiles of measured ÷ predicted, each moved ``widening`` times as far from the median
    in log space (1: the percentiles themselves)."""
    med, lo, hi = (float(np.percentile(ratios, q)) for q in (50, 10, 90))
    # min/max: at a widening of 1 the power can round a last bit inside the percentile it starts from
    return min(lo, med * (lo / med) ** widening), max(hi, med * (hi / med) ** widening)


def _held_out_coverage(ratios: np.ndarray, sources: np.ndarray, widening: float) -> float | None:
    """The share of the figures inside the range built, at ``widening``, from the other sources' figures alone:
    how often the interval would have held a figure of a campaign it was not built on. None with one source."""
    if len(set(sources)) < 2:
        return None
    inside = 0
    for source in set(sources):
        lo, hi = _percentile_range(ratios[sources != source], widening)
        own = ratios[sources == source]
        inside += int(np.sum((own >= lo) & (own <= hi)))
    return inside / len(ratios)


def held_out_interval(ratios: Any, sources: Any) -> Interval:
    """The interval of figures measured ÷ predicted (each already predicted without its source), from their
    sources: the 10th–90th percentiles, widened until they hold 80 % of an unseen campaign's figures.

    A campaign's figures share an offset (its vLLM build, host, harness), so a range built on the campaigns at
    hand holds fewer of a new campaign's figures than the 80 % its percentiles suggest: on the 2026-12-04 latency
    corpus the per-regime ranges held 61 % (tensor parallel) to 74 % (dense) of the figures of the campaign each
    was built without. The range is widened about its median in log space by the smallest factor (steps of 0.05,
    at most 4) at which, built without each campaign in turn, it holds ``HELD_OUT_COVERAGE`` of that campaign's
    figures; the factor and the coverage it reached are kept."""
    r, src = np.asarray(ratios, dtype=float), np.asarray(sources)
    for widening in map(float, _WIDENINGS):
        coverage = _held_out_coverage(r, src, widening)
        if coverage is None or coverage >= HELD_OUT_COVERAGE:
            break
    lo, hi = _percentile_range(r, widening)
    return Interval(n=len(r), sources=len(set(src)), median_ratio=float(np.median(r)), low_ratio=lo, high_ratio=hi,
                    median_abs_error=float(np.median(np.abs(r - 1))), p10_ratio=float(np.percentile(r, 10)),
                    p90_ratio=float(np.percentile(r, 90)), widening=widening, held_out_coverage=coverage)


def interval_words(iv: Interval) -> str:
    """How an interval's ends were set, in words."""
    if iv.widening == 1.0 or iv.p10_ratio is None or iv.p90_ratio is None:
        return "10th–90th pct"
    held = ("" if iv.held_out_coverage is None else
            f"; built without a source, it held {100 * iv.held_out_coverage:.0f}% of its figures")
    return f"10th–90th pct {iv.p10_ratio:.2f}–{iv.p90_ratio:.2f} widened ×{iv.widening:g}{held}"
