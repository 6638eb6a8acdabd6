"""The requests a served load sends (:class:`Requests`), whether drawn as vLLM's benchmark client draws them
(:mod:`.workload`) or read from a trace (:mod:`.trace`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_REQUESTS = 1_000_000


@dataclass(frozen=True)
class Requests:
    """The workload's requests: arrival offsets (seconds; all 0 at an infinite rate), prompt and output lengths;
    a trace's prompt block hashes where it has them (requests sharing leading hashes share that prefix)."""

    arrival_s: np.ndarray
    prompt_len: np.ndarray
    output_len: np.ndarray
    prefix_len: int
    block_hashes: list[list[int]] | None = None
    hash_block_tokens: int = 512
