"""Parse vLLM's start-up log lines into numbers (every variant seen, ARCHITECTURE.md §6).

The raw lines are kept beside the parsed values: a format change in a new vLLM
release then shows up as a missing number with its line still on record.
"""

from __future__ import annotations

import re
from typing import Any

_NUM = r"([0-9][0-9,]*(?:\.[0-9]+)?)"
PATTERNS: dict[str, re.Pattern[str]] = {
    # 0.3x: "CPU KV cache size: 15,887 tokens, Maximum concurrency for 1,024 tokens per request: 15.52x"
    "kv_cache_size": re.compile(
        rf"(?:GPU|CPU|XPU|TPU|\w+)(?: \+ host)? KV cache size: {_NUM} tokens"
        rf"(?:, Maximum concurrency for {_NUM} tokens per request: {_NUM}x)?"),
    # older releases print concurrency on its own line
    "max_concurrency": re.compile(rf"Maximum concurrency for {_NUM} tokens per request: {_NUM}x"),
    "model_loading": re.compile(rf"Model loading took {_NUM} ?GiB"),
    "available_kv_memory": re.compile(rf"Available KV cache memory: {_NUM} ?GiB"),
    "cuda_graph_estimate": re.compile(rf"Estimated CUDA graph memory: {_NUM} ?GiB"),
    "graph_capturing": re.compile(rf"Graph capturing finished in {_NUM} secs?, took {_NUM} GiB"),
    "memory_breakdown": re.compile(
        rf"weights(?: and non-torch)? (?:memory )?(?:took )?{_NUM} ?GiB.*?"
        rf"peak activation (?:memory )?(?:takes |took )?{_NUM} ?GiB.*?"
        rf"(?:non-torch (?:memory )?(?:takes |took )?{_NUM} ?GiB)?", re.IGNORECASE),
    "explicit_kv": re.compile(rf"Explicitly set \({_NUM}/{_NUM}\) GiB for KV cache"),
}


def _f(x: str | None) -> float | None:
    return None if x is None else float(x.replace(",", ""))


def parse_startup(text: str) -> dict[str, Any]:
    """Numbers from the log (GiB values converted to bytes), plus the raw lines they came from."""
    found: dict[str, Any] = {}
    raw: dict[str, str] = {}
    for line in text.splitlines():
        for key, pat in PATTERNS.items():
            m = pat.search(line)
            if not m or key in raw:
                continue
            raw[key] = line.strip()
            g = [_f(x) for x in m.groups()]
            if key == "kv_cache_size":
                found["log_kv_cache_tokens"] = int(g[0])
                if g[1] is not None:
                    found["log_max_concurrency_len"] = int(g[1])
                    found["log_max_concurrency"] = g[2]
            elif key == "max_concurrency":
                found.setdefault("log_max_concurrency_len", int(g[0]))
                found.setdefault("log_max_concurrency", g[1])
            elif key == "graph_capturing":
                found["cuda_graph_bytes"] = int(g[1] * 2**30)
            elif key == "memory_breakdown":
                found["weights_bytes_logged"] = int(g[0] * 2**30)
                found["peak_activation_bytes"] = int(g[1] * 2**30)
                if g[2] is not None:
                    found["non_torch_bytes"] = int(g[2] * 2**30)
            elif key == "explicit_kv":
                found["explicit_kv_bytes"] = int(g[0] * 2**30)
            else:
                found[{"model_loading": "model_loading_bytes",
                       "available_kv_memory": "available_kv_bytes",
                       "cuda_graph_estimate": "cuda_graph_estimate_bytes"}[key]] = int(g[0] * 2**30)
    found["raw_lines"] = raw
    return found
