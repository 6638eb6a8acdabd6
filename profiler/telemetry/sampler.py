"""The sweep's sampler: a parent thread that samples the engine's devices and host.

Samples are rows (time, source, device, signals); a partial parquet file is
rewritten every ``FLUSH_S`` seconds so a crash of the parent loses at most that
much. When the engine ends, samples are tagged with the phase and point the
child's records say was running (their wall-clock start/end are the markers),
stored as ``telemetry/<engine>.parquet``, and each point record gets aggregates.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from profiler.telemetry import cpu_source, nvml_source, prometheus_source

FLUSH_S = 30.0
BASELINE_S = 0.25  # the baseline's two samples apart: long enough that a read's timing is a small share of it
BASE_COLUMNS = ("t", "read_s", "launch", "source", "device", "phase", "point_id")
SIGNAL_COLUMNS = nvml_source.SIGNALS + cpu_source.SIGNALS + prometheus_source.SIGNALS


class TelemetryError(RuntimeError):
    """The telemetry the spec asked for cannot run (e.g. backend nvml without NVML)."""


def open_sources(backend: str, tp: int, root_pid: Any,
                 metrics_url: str | Callable[[], str | None] | None = None,
                 cuda_visible: str | None = None) -> tuple[list[Any], dict[str, str]]:
    """The sources for one engine: NVML devices (when asked for or found), the host and, given
    ``metrics_url`` (a served engine's /metrics URL, or a callable returning it), the server.

    ``cuda_visible``: the engine's CUDA_VISIBLE_DEVICES when the runner chose its GPUs (else the parent's).
    Returns (sources, unavailable) where unavailable explains a missing GPU source.
    """
    host = cpu_source.CpuSource(root_pid=root_pid)
    server = [] if metrics_url is None else [prometheus_source.PrometheusSource(metrics_url)]
    if backend == "cpu":
        return [host, *server], {"nvml": "telemetry.backend is cpu"}
    try:
        gpu = nvml_source.NvmlSource(count=tp, engine_pids=host.pids, cuda_visible=cuda_visible)
    except nvml_source.NvmlUnavailable as exc:
        if backend == "nvml":
            raise TelemetryError(f"telemetry.backend nvml: {exc}") from None
        return [host, *server], {"nvml": str(exc)}
    return [gpu, host, *server], {}


def check_backend(backend: str, tp: int) -> None:
    """Fail before any engine starts when the asked-for backend cannot run."""
    if backend != "nvml":
        return
    sources, _ = open_sources(backend, tp, None)
    for s in sources:
        s.close()


class Sampler:
    """Samples every source at a fixed interval in a daemon thread."""

    def __init__(self, sources: list[Any], interval_s: float, partial_path: Path | None = None,
                 unavailable: dict[str, str] | None = None):
        self.sources = sources
        self.unavailable = dict(unavailable or {})  # whole sources that could not open, and why
        self.interval_s = interval_s
        self.partial_path = partial_path
        self.rows: list[dict[str, Any]] = []
        self.cpu_s = 0.0  # the sampler thread's own CPU time
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kvprof-sampler", daemon=True)
        self._lock = threading.Lock()

    def start(self) -> Sampler:
        # The baseline before the engine starts: two samples a short interval apart, so an energy counter gives
        # the idle draw as a rate (profiler.telemetry.energy.idle_power).
        self.sample_once(counters=True)
        time.sleep(BASELINE_S)
        self.sample_once(counters=True)
        self._thread.start()
        return self

    def sample_once(self, counters: bool = False) -> None:
        """One read of every source; ``counters``: a source's cumulative counters too, even where it reads them
        less often than it samples (NVML's energy counter on a driver where it is slow)."""
        batch = []
        for src in self.sources:
            if counters and hasattr(src, "read_counters_next"):
                src.read_counters_next()
            t = time.time()
            try:
                rows = src.sample()
            except Exception as exc:  # a sampler bug must not stop the sweep
                self.errors.append(f"{src.kind}: {type(exc).__name__}: {exc}")
                continue
            # A read can take long (a server's /metrics on a busy machine: seconds), and its values are from some
            # moment inside it: tag_phases gives a point only the samples read wholly inside it.
            read_s = time.time() - t
            batch.extend({"t": t, "read_s": read_s, "source": src.kind, **r} for r in rows)
        with self._lock:
            self.rows.extend(batch)

    def _run(self) -> None:
        c0 = time.thread_time()
        next_t = time.monotonic() + self.interval_s
        last_flush = time.monotonic()
        while not self._stop.wait(max(0.0, next_t - time.monotonic())):
            self.sample_once()
            next_t += self.interval_s
            now = time.monotonic()
            if next_t < now:  # fell behind (a slow NVML call): skip, don't burst
                next_t = now + self.interval_s
            if self.partial_path and now - last_flush > FLUSH_S:
                self.flush()
                last_flush = now
            self.cpu_s = time.thread_time() - c0

    def flush(self) -> None:
        from profiler.store import atomic_write_bytes

        if not self.partial_path:
            return
        try:
            atomic_write_bytes(self.partial_path, frame(self.snapshot()).to_parquet(index=False))
        except Exception as exc:
            self.errors.append(f"flush: {type(exc).__name__}: {exc}")

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.rows)

    def stop(self) -> pd.DataFrame:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self.sample_once(counters=True)  # the state after the engine is gone
        for src in self.sources:
            with contextlib.suppress(Exception):
                src.close()
        return frame(self.snapshot())

    def describe(self) -> dict[str, Any]:
        sources = [s.describe() for s in self.sources]
        unavailable = {k: v for src in sources for k, v in src.get("unavailable", {}).items()}
        return {"interval_s": self.interval_s, "sampler_cpu_s": self.cpu_s, "errors": self.errors[:20],
                "sources": sources, "unavailable": unavailable | self.unavailable}


def frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Rows → a table with every column, whatever the sources (missing = null)."""
    df = pd.DataFrame(rows, columns=[c for c in BASE_COLUMNS if c not in ("phase", "point_id", "launch")]
                      + list(SIGNAL_COLUMNS))
    df["read_s"] = pd.to_numeric(df["read_s"], errors="coerce").astype("float64")
    for col in SIGNAL_COLUMNS:
        if col == "throttled":
            df[col] = df[col].astype("boolean")
        elif col == "clocks_event_reasons":
            df[col] = df[col].astype("Int64")
        else:
            df[col] = pd.to_numeric(df[col], errors="coerce").astype("float64")
    return df


def tag_phases(df: pd.DataFrame, engine_rec: dict[str, Any], point_recs: list[dict[str, Any]],
               launched_at: float) -> pd.DataFrame:
    """Label each sample with the phase and point running at its time (half-open intervals). A sample is given
    a point only when its whole read (``t`` to ``t + read_s``) lay inside the point: a read that straddles two
    points holds values of either, and belongs to neither."""
    df = df.copy()
    df["phase"] = "idle"
    df["point_id"] = pd.Series([None] * len(df), dtype="object")
    t = df["t"]
    df.loc[t < launched_at, "phase"] = "baseline"
    started, ready = engine_rec.get("started_at"), engine_rec.get("ready_at")
    if ready:
        df.loc[(t >= launched_at) & (t < ready), "phase"] = "startup"
    elif started or engine_rec.get("status") not in (None, "ok"):
        df.loc[t >= launched_at, "phase"] = "startup"  # never became ready
    for ph in engine_rec.get("phases", []):
        df.loc[(t >= ph["start"]) & (t < ph["end"]), "phase"] = ph["phase"]
    read_end = t + (df["read_s"].fillna(0.0) if "read_s" in df else 0.0)
    for rec in point_recs:
        s, e = rec.get("started_at"), rec.get("finished_at")
        if s is None or e is None:
            continue
        mask = (t >= s) & (read_end < e)
        df.loc[mask, "phase"] = rec["point"]["phase"]
        df.loc[mask, "point_id"] = rec["id"]
    return df


def _mean(s: pd.Series) -> float | None:
    s = s.dropna()
    return None if s.empty else float(s.mean())


def _max(s: pd.Series) -> float | None:
    s = s.dropna()
    return None if s.empty else float(s.max())


def _gpm_means(g: pd.DataFrame, start: float | None) -> tuple[dict[str, float | None], int, bool]:
    """Time-weighted GPM means over the windows that lie inside the point.

    A GPM value averages the window since the device's previous GPM sample, so the
    first one stamped inside a point may mostly cover what ran before it. Those are
    dropped when ``start`` is known and at least one window lies wholly inside;
    otherwise all are used and ``partial`` says so.
    """
    cols = ("gpm_dram_bw_pct", "gpm_sm_pct", "gpm_tensor_pct")
    rows = g.dropna(subset=["gpm_dram_bw_pct"])
    partial = False
    if start is not None and not rows.empty:  # frame() always has gpm_window_s (null in older data)
        inside = rows[rows["t"] - rows["gpm_window_s"].fillna(0.0) >= start - 1e-3]
        partial = inside.empty
        rows = rows if inside.empty else inside
    if rows.empty:
        return dict.fromkeys(cols), 0, False
    w = rows["gpm_window_s"].fillna(1.0)
    means = {}
    for c in cols:
        v = rows[c].notna()
        means[c] = float((rows.loc[v, c] * w[v]).sum() / w[v].sum()) if v.any() else None
    return means, len(rows), partial


def _rise(s: pd.Series) -> float | None:
    """A counter's rise from its first to its last sample; None with under two samples or
    when it ever went down (the server restarted: the rise across the reset is unknown)."""
    s = s.dropna()
    if len(s) < 2 or (s.diff().dropna() < 0).any():
        return None
    return float(s.iloc[-1] - s.iloc[0])


def _server(g: pd.DataFrame) -> dict[str, Any]:
    """A served engine's /metrics samples over a point (ServerPointTelemetry)."""
    g = g.sort_values("t")
    hits, queries = _rise(g["prefix_cache_hits_total"]), _rise(g["prefix_cache_queries_total"])
    return {
        "samples": len(g),
        "peak_kv_cache_usage": _max(g["kv_cache_usage"]), "mean_kv_cache_usage": _mean(g["kv_cache_usage"]),
        "peak_requests_running": _max(g["requests_running"]), "peak_requests_waiting": _max(g["requests_waiting"]),
        "preemptions": _rise(g["preemptions_total"]),
        "prefix_cache_hits": hits, "prefix_cache_queries": queries,
        "prefix_cache_hit_rate": hits / queries if hits is not None and queries else None,
        "prompt_tokens": _rise(g["prompt_tokens_total"]), "generation_tokens": _rise(g["generation_tokens_total"]),
    }


def aggregate(samples: pd.DataFrame, devices: dict[str, dict[str, Any]],
              start: float | None = None) -> dict[str, Any]:
    """Per device: peak/mean memory, bandwidth, power, clocks, throttling over a point's samples;
    for the server, KV-cache usage, queue depths and counter rises.

    ``start`` (the point's wall-clock start) lets GPM means keep to windows inside the point.
    """
    out: dict[str, Any] = {}
    for label, g in samples.groupby("device", sort=True):
        if label == "host":
            out[label] = {"samples": len(g), "peak_rss_bytes": _max(g["rss_bytes"]),
                          "mean_rss_bytes": _mean(g["rss_bytes"]), "mean_cpu_pct": _mean(g["cpu_pct"]),
                          "peak_sys_mem_used_bytes": _max(g["sys_mem_used_bytes"])}
            continue
        if label == "server":
            out[label] = _server(g)
            continue
        gpm, gpm_windows, gpm_partial = _gpm_means(g, start)
        bw_pct = gpm["gpm_dram_bw_pct"]
        spec = (devices.get(label) or {}).get("spec_bandwidth_Bps")
        throttled = g["throttled"].dropna()
        out[label] = {
            "samples": len(g),
            "peak_mem_used_bytes": _max(g["mem_used_bytes"]), "mean_mem_used_bytes": _mean(g["mem_used_bytes"]),
            "peak_engine_mem_bytes": _max(g["engine_mem_bytes"]),
            "mean_gpm_dram_bw_pct": bw_pct,
            "gpm_implied_dram_Bps": None if bw_pct is None or spec is None else bw_pct / 100 * spec,
            "gpm_windows": gpm_windows, "gpm_partial_windows": gpm_partial,
            "mean_util_mem_busy_pct": _mean(g["util_mem_busy_pct"]),
            "mean_gpm_sm_pct": gpm["gpm_sm_pct"], "mean_gpm_tensor_pct": gpm["gpm_tensor_pct"],
            "mean_power_w": _mean(g["power_w"]), "peak_power_w": _max(g["power_w"]),
            "mean_clock_sm_mhz": _mean(g["clock_sm_mhz"]), "mean_clock_mem_mhz": _mean(g["clock_mem_mhz"]),
            "max_temperature_c": _max(g["temperature_c"]),
            "throttled_seen": None if throttled.empty else bool(throttled.any()),
        }
    return out
