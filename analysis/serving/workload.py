"""What a served load is (:class:`ServedWorkload`): how many requests, their lengths, and how they arrive — a closed
loop (``vllm bench serve --max-concurrency N`` at an infinite rate) or an open loop at a rate, Poisson or
gamma-bursty, with or without a cap on requests in flight — and the requests it makes (:func:`requests`), drawn as
vLLM's benchmark client draws them (``vllm/benchmarks/datasets/utils.py`` ``get_sampling_params`` for the lengths,
``vllm/benchmarks/serve.py`` for the gaps)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_REQUESTS = 1_000_000


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

    @model_validator(mode="after")
    def _shapes(self) -> ServedWorkload:
        if self.prefix_len >= self.prompt_len:
            raise ValueError(f"prefix_len {self.prefix_len} must be shorter than prompt_len {self.prompt_len}")
        if self.request_rate is None and self.max_concurrency is None and self.num_requests > 100_000:
            raise ValueError("100,000+ requests sent at once with no --max-concurrency: give a rate or a cap")
        return self

    @property
    def closed_loop(self) -> bool:
        return self.request_rate is None


@dataclass(frozen=True)
class Requests:
    """The workload's requests: arrival offsets (seconds; all 0 at an infinite rate), prompt and output lengths."""

    arrival_s: np.ndarray
    prompt_len: np.ndarray
    output_len: np.ndarray
    prefix_len: int


def requests(w: ServedWorkload) -> Requests:
    """The requests ``w`` sends, lengths drawn as vLLM's random dataset draws them (the prefix is part of the prompt:
    ``--random-input-len`` is what follows it), arrival gaps as its client draws them."""
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
