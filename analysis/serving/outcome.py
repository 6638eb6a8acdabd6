"""What a replayed serving run gives (:class:`ServedOutcome`): the figures ``vllm bench serve`` prints — TTFT, TPOT,
ITL and end-to-end latency as a mean and percentiles, throughput, goodput at SLOs — and the running batch and the
queue over time. Each as vLLM's client computes it (``vllm/benchmarks/serve.py`` ``calculate_metrics``): TTFT from
the request's send to its first token; TPOT of a request with more than one output token (end − first) ÷ (tokens −
1); ITL every gap between a request's tokens; throughput over the run's duration, first send to last end."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from analysis.serving.workload import ServedWorkload

PERCENTILES = (50, 90, 99)


class Distribution(BaseModel):
    """A latency's mean and percentiles, seconds (None where no request had one: TPOT of one-token outputs)."""

    model_config = ConfigDict(extra="forbid")

    mean_s: float | None
    median_s: float | None
    p90_s: float | None
    p99_s: float | None

    @classmethod
    def of(cls, values: np.ndarray) -> Distribution:
        v = np.asarray(values, float)
        v = v[np.isfinite(v)]
        if not v.size:
            return cls(mean_s=None, median_s=None, p90_s=None, p99_s=None)
        p50, p90, p99 = (float(x) for x in np.percentile(v, PERCENTILES))
        return cls(mean_s=float(v.mean()), median_s=p50, p90_s=p90, p99_s=p99)


class Timeline(BaseModel):
    """The engine's running batch and waiting queue after each step (at most 500 points, evenly taken)."""

    model_config = ConfigDict(extra="forbid")

    t_s: list[float]
    running: list[int]
    waiting: list[int]


class RequestTimes(BaseModel):
    """Each request's figures, in the workload's order (seconds), to set beside a measured run's per-request ones."""

    model_config = ConfigDict(extra="forbid")

    sent_s: list[float]
    ttft_s: list[float]
    e2el_s: list[float]


class ServedOutcome(BaseModel):
    """A served run as the replay predicts it."""

    model_config = ConfigDict(extra="forbid")

    workload: ServedWorkload
    completed: int
    duration_s: float = Field(description="first request sent to last request ended")
    request_throughput: float = Field(description="requests a second")
    output_tokens_per_s: float
    total_tokens_per_s: float
    ttft: Distribution
    tpot: Distribution
    itl: Distribution
    e2el: Distribution
    request_goodput: float | None = Field(None, description="requests a second meeting every SLO given")
    slo: dict[str, float] = Field({}, description="the SLOs goodput was counted at: ttft_s, tpot_s, e2el_s")
    api_s: float = Field(0.0, description="the API server's cost per request, in each first token and end")
    steps: int = Field(description="engine steps replayed")
    busy_s: float = Field(description="time the engine was running steps")
    preemptions: int = Field(description="running requests preempted for KV blocks (recomputed later)")
    max_running: int
    mean_running: float = Field(description="requests running, averaged over the steps' time")
    max_waiting: int
    timeline: Timeline
    requests: RequestTimes | None = Field(None, description="each request's figures, where asked for")


def outcome(w: ServedWorkload, *, sent: np.ndarray, first: np.ndarray, done: np.ndarray,
            output_len: np.ndarray, prompt_len: np.ndarray, gaps: np.ndarray, api_s: float, steps: int,
            busy_s: float, preemptions: int, timeline: tuple[np.ndarray, np.ndarray, np.ndarray],
            slo: dict[str, float] | None = None, per_request: bool = False) -> ServedOutcome:
    """The figures of a replayed run from each request's send, first token and end (engine times; the API server's
    ``api_s`` added to each request's first token and end)."""
    ttft = first - sent + api_s
    e2el = done - sent + api_s
    many = output_len > 1
    tpot = np.where(many, (done - first) / np.maximum(output_len - 1, 1), np.nan)
    start, end = float(np.nanmin(sent)), float(np.nanmax(done)) + api_s
    duration = max(end - start, 1e-12)
    t, running, waiting = timeline
    dts = np.diff(np.concatenate([[start], t])) if t.size else np.zeros(0)
    take = np.unique(np.linspace(0, t.size - 1, min(500, t.size)).round().astype(int)) if t.size else []
    good = None
    if slo:
        ok = np.ones(len(ttft), bool)
        for key, values in (("ttft_s", ttft), ("tpot_s", np.nan_to_num(tpot)), ("e2el_s", e2el)):
            if key in slo:
                ok &= values <= slo[key]
        good = float(ok.sum()) / duration
    return ServedOutcome(
        workload=w, completed=len(done), duration_s=duration, request_throughput=len(done) / duration,
        output_tokens_per_s=float(output_len.sum()) / duration,
        total_tokens_per_s=float(output_len.sum() + prompt_len.sum()) / duration,
        ttft=Distribution.of(ttft), tpot=Distribution.of(tpot), itl=Distribution.of(gaps), e2el=Distribution.of(e2el),
        request_goodput=good, slo=slo or {}, api_s=api_s, steps=steps, busy_s=busy_s, preemptions=preemptions,
        max_running=int(running.max()) if running.size else 0,
        mean_running=float((running * dts).sum() / dts.sum()) if dts.size and dts.sum() > 0 else 0.0,
        max_waiting=int(waiting.max()) if waiting.size else 0,
        timeline=Timeline(t_s=[float(t[i]) for i in take], running=[int(running[i]) for i in take],
                          waiting=[int(waiting[i]) for i in take]),
        requests=(RequestTimes(sent_s=sent.tolist(), ttft_s=ttft.tolist(), e2el_s=e2el.tolist()) if per_request
                  else None))
