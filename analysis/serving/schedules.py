"""A replayed served figure as weighted steps (:func:`figure_weights`): which steps of the replay (by their shape:
decoding requests, context, prompt tokens, cached prefix, prompts) a request's TTFT or TPOT spans, so the figure is
Σ weight × step time (+ the API server's per-request cost for a TTFT) — linear in the step model's terms, as the
closed-form schedules of ``analysis.latency.step`` are, so the step model can be fitted through the replay.

A request's TTFT spans the steps from the one running when it was sent (the share of it still to run) to the one
that sampled its first token; its TPOT the steps after that to its last token, over its tokens after the first. A
mean weighs every request alike; a median is the median request's steps (the one whose figure is the median under
the constants the replay ran with)."""

from __future__ import annotations

from collections import defaultdict
from typing import Literal

import numpy as np

from analysis.serving.outcome import ServedOutcome
from analysis.serving.replay import StepTrace

Shape = tuple[int, float, int, float, int]


def figure_weights(trace: StepTrace, outcome: ServedOutcome, output_len: np.ndarray, figure: Literal["ttft", "tpot"],
                   statistic: Literal["mean", "median"], context_bucket: int = 64) -> dict[Shape, float]:
    """The weight of each step shape in ``figure``'s ``statistic`` (the replay ran with ``per_request`` and
    ``trace``); shapes with contexts rounded to the nearest ``context_bucket`` tokens, so a long decode run is a few
    shapes."""
    assert outcome.requests is not None, "replay(..., per_request=True) gives each request's times"
    t_end = np.asarray(trace.t_end)
    dt = np.diff(np.concatenate([[0.0], t_end]))
    sent = np.asarray(outcome.requests.sent_s)
    ttft = np.asarray(outcome.requests.ttft_s)
    e2el = np.asarray(outcome.requests.e2el_s)
    first_t = sent + ttft - outcome.api_s  # the engine times of its first and last tokens
    done_t = sent + e2el - outcome.api_s
    per_request: list[dict[int, float]] = []
    values = []
    for q in range(sent.size):
        w: dict[int, float] = defaultdict(float)
        if figure == "ttft":
            last = int(np.searchsorted(t_end, first_t[q] - 1e-9))
            start = int(np.searchsorted(t_end, sent[q] + 1e-12, side="right"))
            start = min(start, last)
            for j in range(start, last + 1):
                share = 1.0 if j > start else min(1.0, (t_end[j] - sent[q]) / dt[j]) if dt[j] > 0 else 1.0
                w[j] += share
            values.append(ttft[q])
        else:
            if output_len[q] <= 1:
                continue
            lo = int(np.searchsorted(t_end, first_t[q] - 1e-9))
            hi = int(np.searchsorted(t_end, done_t[q] - 1e-9))
            for j in range(lo + 1, hi + 1):
                w[j] += 1.0 / (output_len[q] - 1)
            values.append((e2el[q] - ttft[q]) / (output_len[q] - 1))
        per_request.append(w)
    if not per_request:
        return {}
    if statistic == "median":
        order = np.argsort(values)
        chosen = [per_request[int(order[(len(values) - 1) // 2])]]
    else:
        chosen = per_request
    out: dict[Shape, float] = defaultdict(float)
    for w in chosen:
        for j, x in w.items():
            d, ctx, p, prefix, ps = trace.shapes[j]
            key = (d, round(ctx / context_bucket) * context_bucket if d else 0.0, p,
                   round(prefix / context_bucket) * context_bucket if ps else 0.0, ps)
            out[key] += x / len(chosen)
    return dict(out)

