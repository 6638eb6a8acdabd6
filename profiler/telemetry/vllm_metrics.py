"""vLLM's Prometheus metrics under neutral names, from ``LLM.get_metrics()`` or a server's /metrics page.

One small map from kvprof's names to the engine's spelling, so nothing else
hard-codes ``vllm:…`` strings and a rename in a future vLLM is a one-line fix.
Counters are named by their family (``prometheus_client`` strips ``_total``
from a counter family's name; its samples keep it).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

NAMES = {
    "kv_cache_usage": "vllm:kv_cache_usage_perc",  # used blocks ÷ (num_blocks − 1), 0..1
    "running": "vllm:num_requests_running",
    "waiting": "vllm:num_requests_waiting",
    "preemptions": "vllm:num_preemptions",  # counter over the engine's life
    "prefix_cache_hits": "vllm:prefix_cache_hits",  # counter: prompt tokens found in the prefix cache
    "prefix_cache_queries": "vllm:prefix_cache_queries",  # counter: prompt tokens looked up in it
    "prompt_tokens": "vllm:prompt_tokens",  # counter
    "generation_tokens": "vllm:generation_tokens",  # counter
}
_BY_VLLM = {v: k for k, v in NAMES.items()}
MAX_OVER_ENGINES = frozenset({"kv_cache_usage"})  # the fullest engine; every other value is summed over engines


def combine(values: Iterable[tuple[str, float]]) -> dict[str, float | None]:
    """(vLLM family name, value) pairs, one per label set → neutral names (None: absent)."""
    out: dict[str, float | None] = dict.fromkeys(NAMES)
    for name, value in values:
        key = _BY_VLLM.get(name)
        if key is None or value is None:
            continue
        prev = out[key]
        if key in MAX_OVER_ENGINES:
            out[key] = float(value) if prev is None else max(prev, float(value))
        else:
            out[key] = float(value) + (prev or 0.0)
    return out


def read(llm: Any) -> dict[str, float | None]:
    """Current values in-process; counts are summed over engine labels, usage is the highest."""
    return combine((m.name, getattr(m, "value", None)) for m in llm.get_metrics())


def parse_page(text: str) -> dict[str, float | None]:
    """A /metrics page (Prometheus text format) → the same values as :func:`read`.

    Raises ValueError when the page is not Prometheus text. Only a gauge's own sample
    and a counter's ``_total`` sample count (not ``_created``, not histogram buckets).
    """
    from prometheus_client.parser import text_string_to_metric_families

    pairs = []
    for family in text_string_to_metric_families("\n".join(_lines_of_interest(text))):
        if family.name not in _BY_VLLM:
            continue
        wanted = family.name + "_total" if family.type == "counter" else family.name
        pairs.extend((family.name, s.value) for s in family.samples if s.name == wanted)
    return combine(pairs)


def _lines_of_interest(text: str) -> list[str]:
    """The page's lines about NAMES' families (a vLLM page is ~70 kB of histograms; parsing it all costs ~10×)."""
    prefixes = tuple(NAMES.values())
    keep = []
    for line in text.split("\n"):  # as the parser splits it
        if line.startswith("#"):
            parts = line.split(None, 3)  # "# TYPE name type" / "# HELP name text"
            name = parts[2] if len(parts) > 2 else ""
        else:
            name = line.split("{", 1)[0].split(None, 1)[0] if line.strip() else ""
        if name.startswith(prefixes):
            keep.append(line)
    return keep
