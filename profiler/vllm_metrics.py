"""vLLM's Prometheus metrics under neutral names, read in-process with ``LLM.get_metrics()``.

One small map from kvprof's names to the engine's spelling, so nothing else
hard-codes ``vllm:…`` strings and a rename in a future vLLM is a one-line fix.
"""

from __future__ import annotations

from typing import Any

NAMES = {
    "kv_cache_usage": "vllm:kv_cache_usage_perc",  # used blocks ÷ (num_blocks − 1), 0..1
    "running": "vllm:num_requests_running",
    "waiting": "vllm:num_requests_waiting",
    "preemptions": "vllm:num_preemptions",  # counter over the engine's life
}
_BY_VLLM = {v: k for k, v in NAMES.items()}


def read(llm: Any) -> dict[str, float | None]:
    """Current values; counts are summed over engine labels, usage is the highest."""
    out: dict[str, float | None] = dict.fromkeys(NAMES)
    for m in llm.get_metrics():
        key = _BY_VLLM.get(m.name)
        value = getattr(m, "value", None)
        if key is None or value is None:
            continue
        prev = out[key]
        if key == "kv_cache_usage":
            out[key] = float(value) if prev is None else max(prev, float(value))
        else:
            out[key] = float(value) + (prev or 0.0)
    return out
