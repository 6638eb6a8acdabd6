"""Small valid records for tests, built through the results contract (analysis.results.schema)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import analysis.results.schema as _schema
from analysis.catalog import model_dir
from analysis.results.schema import (
    CapacityFacts,
    DecodeMeasurements,
    DecodePoint,
    EngineRecord,
    EngineSettings,
    LatencyStats,
    Manifest,
    PointSettings,
    ServeMeasurements,
    ServePoint,
    ServerRecord,
    ServerTokenizer,
)
from profiler.tokenizer import SYNTHETIC_NOTE

SETTINGS = EngineSettings(model_dir="/models/tiny", model_sha256="0" * 64, max_model_len=1024, block_size=32)
FACTS = CapacityFacts(num_gpu_blocks=512, block_size=32, cache_dtype="auto", max_model_len=1024,
                      max_num_batched_tokens=4096, max_num_seqs=256, model_dtype="bfloat16")


def engine_record(engine_id: str = "e", **fields: Any) -> EngineRecord:
    """An engine that came up (status ok, capacity facts present), with `fields` set."""
    return EngineRecord.model_validate({"id": engine_id, "status": "ok", "engine": SETTINGS, "capacity": FACTS}
                                       | fields)


def decode_point(engine_id: str = "e", concurrency: int = 1, **fields: Any) -> DecodePoint:
    """A decode point that ran, with `fields` (started_at, finished_at, …) set."""
    point = PointSettings(engine_id=engine_id, phase="decode", concurrency=concurrency, prompt_len=64,
                          output_len=16, repeats=1, warmup=0)
    measured = DecodeMeasurements(ttft_s=0.01, tpot_s=0.002, decode_step_s=0.002, output_tokens_per_s=500.0,
                                  mean_context=72.0, requests_measured=concurrency)
    return DecodePoint.model_validate({"id": point.id, "engine_id": engine_id, "engine": SETTINGS, "point": point,
                                       "status": "ok", "measurements": measured} | fields)


# --- serve mode ---------------------------------------------------------------------------------------

# The server's per-point /metrics aggregates (device "server") are another helper's model; records that carry
# them can be built only once it is in the contract.
HAVE_SERVER_TELEMETRY = hasattr(_schema, "ServerPointTelemetry")
TOKENIZER = ServerTokenizer(path="tokenizers/0000/", vocab_size=32000, note=SYNTHETIC_NOTE,
                            generator="kvprof word-level v1")


def server_record(engine_id: str = "e", settings: EngineSettings = SETTINGS, **fields: Any) -> ServerRecord:
    """An OpenAI server that came up (status ok, ready) with the synthetic tokenizer, with `fields` set."""
    return ServerRecord.model_validate({
        "id": engine_id, "status": "ok", "engine": settings, "port": 8000, "ready_at": 1.0, "startup_s": 21.0,
        "server_kwargs": {"model": settings.model_dir, "max_model_len": settings.max_model_len,
                          "block_size": settings.block_size},
        "command": ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", settings.model_dir],
        "tokenizer": TOKENIZER, "vllm_version": "0.32.0"} | fields)


def latency(p50_ms: float, p90_ms: float | None = None, p99_ms: float | None = None) -> LatencyStats:
    """A latency's statistics from its percentiles in ms (mean and median = p50; p90, p99 default to p50)."""
    p90_ms = p50_ms if p90_ms is None else p90_ms
    p99_ms = p90_ms if p99_ms is None else p99_ms
    return LatencyStats(mean_s=p50_ms / 1e3, median_s=p50_ms / 1e3, std_s=0.0, p50_s=p50_ms / 1e3,
                        p90_s=p90_ms / 1e3, p99_s=p99_ms / 1e3)


def serve_point(engine_id: str = "e", *, concurrency: int | None = 4, request_rate: float | None = None,
                prompt_len: int = 64, output_len: int = 16, prefix_len: int | None = None, num_requests: int = 8,
                settings: EngineSettings = SETTINGS, tpot_ms: float = 5.0, itl_ms: float | None = None,
                ttft_ms: float = 20.0, measurements: dict[str, Any] | None = None,
                server: dict[str, Any] | None = None, **fields: Any) -> ServePoint:
    """A serve point that ran: `num_requests` requests at `concurrency` / `request_rate`, each of `prompt_len`
    + `output_len` tokens, with TPOT, ITL and TTFT medians as given (p90/p99 equal them unless `measurements`
    says otherwise; `measurements` overrides any field). `server`: the point's /metrics aggregates (device
    "server"), only where the contract has them (HAVE_SERVER_TELEMETRY)."""
    point = PointSettings(engine_id=engine_id, phase="serve", concurrency=concurrency, request_rate=request_rate,
                          num_requests=num_requests, prefix_len=prefix_len, prompt_len=prompt_len,
                          output_len=output_len, repeats=1, warmup=1)
    duration = 2.0
    e2el = ttft_ms + tpot_ms * (output_len - 1)
    m: dict[str, Any] = {
        "load_generator": "vllm.benchmarks.serve 0.32.0", "duration_s": duration, "completed": num_requests,
        "failed": 0, "total_input_tokens": num_requests * prompt_len, "total_output_tokens": num_requests * output_len,
        "request_throughput": num_requests / duration, "output_tokens_per_s": num_requests * output_len / duration,
        "total_tokens_per_s": num_requests * (prompt_len + output_len) / duration,
        "ttft": latency(ttft_ms), "tpot": latency(tpot_ms), "itl": latency(tpot_ms if itl_ms is None else itl_ms),
        "e2el": latency(e2el), "mean_context": prompt_len + output_len / 2}
    m |= measurements or {}
    rec: dict[str, Any] = {"id": point.id, "engine_id": engine_id, "engine": settings, "point": point, "status": "ok",
                           "started_at": 10.0, "finished_at": 12.0, "measurements": ServeMeasurements(**m)}
    if server is not None:
        rec["telemetry"] = {"server": {"samples": 20} | server}
    return ServePoint.model_validate(rec | fields)


def write_run(root: Path, records: list[Any], name: str = "serve-test") -> Path:
    """A results directory of `records` (engine, server and point records, each through its model) and a
    manifest naming the engines."""
    root = Path(root)
    engines = []
    for rec in records:
        kind = "engines" if isinstance(rec, EngineRecord) else "servers" if isinstance(rec, ServerRecord) else "points"
        if kind != "points":
            engines.append(rec.id)
        rec.save_file(root / kind / f"{rec.id}.json")
    Manifest(name=name, status="complete", engines=sorted(set(engines))).save_file(root / "manifest.json")
    return root


def engine_only_run(root: Path, max_num_seqs: int = 64, **settings) -> Path:
    """One ok tiny-llama-gqa engine (capacity facts only, no points) with the given engine settings."""
    engine = EngineSettings(model_dir=str(model_dir("tiny-llama-gqa")), model_sha256="tiny", block_size=32,
                            max_model_len=1024, kv_cache_memory_bytes=16 * 2**20, **settings)
    EngineRecord.model_validate({
        "id": engine.id, "status": "ok", "device": "CPU (x86_64)", "vllm_version": "0.32.0",
        "torch_version": "2.13.0+cpu", "engine": engine,
        "capacity": {"num_gpu_blocks": 512, "block_size": 32, "kv_cache_size_tokens": 16_384,
                     "kv_cache_max_concurrency": 16.0, "max_model_len": 1024, "max_num_batched_tokens": 4096,
                     "max_num_seqs": max_num_seqs, "cache_dtype": "auto", "model_dtype": "bfloat16"}},
    ).save_file(root / "engines" / f"{engine.id}.json")
    Manifest(name=root.name, status="complete", engines=[engine.id], engine_launches=1).save_file(
        root / "manifest.json")
    return root
