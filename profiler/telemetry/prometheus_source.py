"""Server telemetry: a vLLM OpenAI server's /metrics page, scraped at every sample.

Serve mode runs ``vllm serve`` on a loopback port; this source reads its
Prometheus page (KV-cache usage, running and waiting requests, preemptions,
prefix-cache hits) into the same timeline as the GPU and host samples, one row
with device ``"server"`` per scrape. A scrape that fails (the server is not up
yet, restarting or dead; a page that is not Prometheus text) gives no row and is
counted; it never raises and never holds the sampler past ``timeout_s``.
"""

from __future__ import annotations

import http.client
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from profiler.telemetry import vllm_metrics

# Telemetry column → the neutral name in vllm_metrics.NAMES.
COLUMNS = {
    "kv_cache_usage": "kv_cache_usage",  # 0..1, the fullest engine
    "requests_running": "running",
    "requests_waiting": "waiting",
    "preemptions_total": "preemptions",  # counters: totals since the server started, summed over engines
    "prefix_cache_hits_total": "prefix_cache_hits",
    "prefix_cache_queries_total": "prefix_cache_queries",
    "prompt_tokens_total": "prompt_tokens",
    "generation_tokens_total": "generation_tokens",
}
SIGNALS = tuple(COLUMNS)
TIMEOUT_S = 0.5  # connect + request + response, all together
MAX_BYTES = 8 * 2**20  # a /metrics page of one vLLM server is ~70 kB; anything past this is refused
_CHUNK = 64 * 1024


class ScrapeError(Exception):
    """One scrape gave no usable page (the message says why)."""


@dataclass
class PrometheusSource:
    """``url``: the /metrics URL, or a callable returning it (None while the server has no port yet)."""

    url: str | Callable[[], str | None]
    kind: str = "vllm"
    timeout_s: float = TIMEOUT_S
    max_bytes: int = MAX_BYTES
    scrapes: int = 0  # tries with a URL
    failed: int = 0
    no_url: int = 0  # samples taken while the callable gave no URL (server not launched)
    last_error: str | None = None
    last_error_at: float | None = None
    last_url: str | None = None
    unavailable: dict[str, str] = field(default_factory=dict)

    def _current_url(self) -> str | None:
        return self.url() if callable(self.url) else self.url

    def sample(self) -> list[dict[str, Any]]:
        try:
            url = self._current_url()
        except Exception as exc:  # the runner's callable failing must not stop the sampler
            return self._fail(f"metrics URL callable: {type(exc).__name__}: {exc}")
        if url is None:
            self.no_url += 1
            return []
        self.last_url = url
        self.scrapes += 1
        try:
            text = fetch(url, self.timeout_s, self.max_bytes)
        except ScrapeError as exc:
            return self._fail(str(exc))
        try:
            values = vllm_metrics.parse_page(text)
        except Exception as exc:  # prometheus_client raises ValueError (and others) on malformed text
            return self._fail(f"{url}: not a Prometheus text page ({type(exc).__name__}: {exc})")
        if all(v is None for v in values.values()):
            return self._fail(f"{url}: the page has none of vLLM's metrics ({', '.join(vllm_metrics.NAMES.values())})")
        return [{"device": "server", **{col: values[name] for col, name in COLUMNS.items()}}]

    def _fail(self, why: str) -> list[dict[str, Any]]:
        self.failed += 1
        self.last_error, self.last_error_at = why, time.time()
        return []

    def describe(self) -> dict[str, Any]:
        unavailable = dict(self.unavailable)
        if self.scrapes and self.failed >= self.scrapes:
            unavailable["vllm"] = f"no /metrics scrape succeeded ({self.failed} tried); last: {self.last_error}"
        return {"backend": self.kind, "url": self.last_url, "timeout_s": self.timeout_s, "scrapes": self.scrapes,
                "failed_scrapes": self.failed, "no_url_samples": self.no_url, "last_error": self.last_error,
                "last_error_at": self.last_error_at, "unavailable": unavailable}

    def close(self) -> None:
        pass


def fetch(url: str, timeout_s: float, max_bytes: int) -> str:
    """GET an http:// URL within ``timeout_s`` in all, at most ``max_bytes``; ScrapeError otherwise."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ScrapeError(f"{url}: not an http://host:port/path URL")
    deadline = time.monotonic() + timeout_s

    def left() -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("timed out")
        return remaining

    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout_s)
    try:
        conn.connect()
        sock = conn.sock  # kept: http.client drops conn.sock when the response says "Connection: close"
        sock.settimeout(left())
        conn.request("GET", target, headers={"Accept": "text/plain"})
        sock.settimeout(left())
        resp = conn.getresponse()
        if resp.status != 200:
            raise ScrapeError(f"{url}: HTTP {resp.status} {resp.reason}")
        length = resp.getheader("Content-Length") or ""
        if length.isdigit() and int(length) > max_bytes:
            raise ScrapeError(f"{url}: the page is {int(length)} bytes, more than the {max_bytes} allowed")
        body = bytearray()
        while True:
            sock.settimeout(left())
            chunk = resp.read1(_CHUNK)  # at most one read of the socket: the deadline holds
            if not chunk:
                break
            body += chunk
            if len(body) > max_bytes:
                raise ScrapeError(f"{url}: the page is more than the {max_bytes} bytes allowed")
    except TimeoutError:
        raise ScrapeError(f"{url}: no complete answer within {timeout_s} s") from None
    except (OSError, http.client.HTTPException) as exc:  # refused, reset, a bad status line
        raise ScrapeError(f"{url}: {type(exc).__name__}: {exc}") from None
    finally:
        conn.close()
    return body.decode("utf-8", errors="replace")
