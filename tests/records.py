"""Small valid records for tests, built through the results contract (analysis.results_schema)."""

from __future__ import annotations

from typing import Any

from analysis.results_schema import (
    CapacityFacts,
    DecodeMeasurements,
    DecodePoint,
    EngineRecord,
    EngineSettings,
    PointSettings,
)

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
