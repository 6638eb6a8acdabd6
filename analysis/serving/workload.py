"""What a served load is (:class:`ServedWorkload`): how many requests, their lengths, and how they arrive — a closed
loop (``vllm bench serve --max-concurrency N`` at an infinite rate) or an open loop at a rate, Poisson or
gamma-bursty, with or without a cap on requests in flight — and the requests it makes (:func:`requests`), drawn as
vLLM's benchmark client draws them (``vllm/benchmarks/datasets/utils.py`` ``get_sampling_params`` for the lengths,
``vllm/benchmarks/serve.py`` for the gaps)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from analysis.serving.arrivals import MAX_REQUESTS, Requests
from analysis.serving.trace import read_trace


class ServedWorkload(BaseModel):
    """A ``vllm bench serve`` run on the random dataset: ``num_requests`` requests of ``prompt_len`` prompt and
    ``output_len`` output tokens (each uniform in [L·(1 − r), L·(1 + r)] with ``range_ratio`` r; the first
    ``prefix_len`` prompt tokens the same in every request), sent at ``request_rate`` a second (None: all at once;
    gaps gamma-distributed with shape ``burstiness``, 1 = Poisson) with at most ``max_concurrency`` in flight (None:
    no cap). All at once with a cap is the closed loop most published serving tables ran."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_requests: int = Field(ge=1, le=MAX_REQUESTS)
    prompt_len: int = Field(ge=1, le=10_000_000, description="prompt tokens, the shared prefix included")
    output_len: int = Field(ge=1, le=10_000_000)
    range_ratio: float = Field(0.0, ge=0, lt=1, allow_inf_nan=False)
    prefix_len: int = Field(0, ge=0, description="prompt tokens every request shares (prefix caching hits them)")
    request_rate: float | None = Field(None, gt=0, allow_inf_nan=False, description="requests a second; None: inf")
    burstiness: float = Field(1.0, gt=0, le=100, allow_inf_nan=False)
    max_concurrency: int | None = Field(None, ge=1, le=MAX_REQUESTS)
    seed: int = Field(0, ge=0)
    first_prompt_cached: bool = Field(True, description="vllm bench serve sends request 0's prompt before the run "
                                                        "(its ready check and warm-ups): prefix caching holds it")
    trace: str | None = Field(None, description="a request trace (analysis.serving.trace: Azure CSV, Mooncake JSONL) "
                                                "whose first num_requests requests are sent at its timestamps; "
                                                "prompt_len and output_len are then its means")
    trace_speed: float = Field(1.0, gt=0, le=1000, allow_inf_nan=False,
                               description="the trace's arrivals this many times faster")

    @model_validator(mode="after")
    def _shapes(self) -> ServedWorkload:
        if self.prefix_len >= self.prompt_len:
            raise ValueError(f"prefix_len {self.prefix_len} must be shorter than prompt_len {self.prompt_len}")
        if (self.request_rate is None and self.trace is None and self.max_concurrency is None
                and self.num_requests > 100_000):
            raise ValueError("100,000+ requests sent at once with no --max-concurrency: give a rate or a cap")
        if self.trace is not None and self.request_rate is not None:
            raise ValueError("a trace sends its requests at its own timestamps: drop the request rate (trace_speed "
                             "scales them)")
        return self


def trace_workload(path: str, num_requests: int | None = None, max_concurrency: int | None = None,
                   speed: float = 1.0) -> ServedWorkload:
    """A trace file's requests as a workload (the first ``num_requests``, all where None), sent at its timestamps
    (``speed`` times faster), at most ``max_concurrency`` in flight."""
    r = read_trace(path, num_requests)
    return ServedWorkload(num_requests=len(r.prompt_len), prompt_len=max(round(float(r.prompt_len.mean())), 2),
                          output_len=max(round(float(r.output_len.mean())), 1), max_concurrency=max_concurrency,
                          first_prompt_cached=False, trace=str(path), trace_speed=speed)


def requests(w: ServedWorkload) -> Requests:
    """The requests ``w`` sends: a trace's (its first num_requests, arrivals sped up by trace_speed), or lengths
    drawn as vLLM's random dataset draws them (the prefix is part of the prompt: ``--random-input-len`` is what
    follows it) and arrival gaps as its client draws them."""
    if w.trace is not None:
        r = read_trace(w.trace, w.num_requests)
        return replace(r, arrival_s=r.arrival_s / w.trace_speed)
    rng = np.random.default_rng(w.seed)
    free = w.prompt_len - w.prefix_len
    lo, hi = math.floor(free * (1 - w.range_ratio)), math.ceil(free * (1 + w.range_ratio))
    prompt = w.prefix_len + rng.integers(max(lo, 1), max(hi, 1) + 1, size=w.num_requests)
    olo = max(math.floor(w.output_len * (1 - w.range_ratio)), 1)
    ohi = max(math.ceil(w.output_len * (1 + w.range_ratio)), 1)
    output = rng.integers(olo, ohi + 1, size=w.num_requests)
    if w.request_rate is None:
        arrival = np.zeros(w.num_requests)
    else:
        theta = 1.0 / (w.request_rate * w.burstiness)
        gaps = rng.gamma(shape=w.burstiness, scale=theta, size=w.num_requests)
        gaps[0] = 0.0  # the client sends its first request at once
        arrival = np.cumsum(gaps)
    return Requests(arrival_s=arrival, prompt_len=prompt.astype(np.int64), output_len=output.astype(np.int64),
                    prefix_len=w.prefix_len)
