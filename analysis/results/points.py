"""``points/<point id>.json``: what one workload point measured (decode, saturation, serve) or why it did not, and
the per-point telemetry aggregates; :func:`load_point` reads any kind.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from analysis.results.record_io import (
    Record,
    ResultsError,
    check_finite,
    describe_errors,
    read_record_text,
    record_kind,
)
from analysis.results.settings import EngineSettings, PointSettings

# "aborted": never tried because its engine died on an earlier point; a plain rerun runs it.
FailureStatus = Literal["oom", "unsupported", "crash", "timeout", "error", "aborted"]


class DecodeMeasurements(BaseModel):
    """A decode point: `concurrency` requests added at once, run to completion `repeats` times.

    * **decode step** — the wall time of one engine scheduler step in which every request
      of the batch already has its first token (prefill is kept out): one token for each
      sequence. ``decode_step_s`` is the median over all such steps of all repeats.
    * **TTFT** — vLLM's ``first_token_latency`` per request: from its arrival to its first
      token, queueing and prefill included. Median over requests.
    * **TPOT** — per request ``(last_token_ts − first_token_ts) / (output tokens − 1)``:
      the mean time between its tokens after the first. Median over requests.
    * **throughput** — ``concurrency × output_len`` ÷ the batch's wall time, median over repeats.
    """

    model_config = ConfigDict(extra="forbid")

    ttft_s: float = Field(ge=0)
    tpot_s: float | None = Field(ge=0)
    tpot_spread_s: float | None = Field(None, description="interquartile range of TPOT over requests")
    e2e_s: float | None = Field(None, description="median request latency, arrival to last token")
    decode_step_s: float | None = Field(gt=0)
    decode_step_spread_s: float | None = Field(None, description="interquartile range of decode steps")
    decode_step_p25_s: float | None = Field(None, ge=0, description="25th percentile of the decode steps")
    decode_step_p75_s: float | None = Field(None, ge=0, description="75th percentile of the decode steps")
    tpot_p25_s: float | None = Field(None, ge=0)
    tpot_p75_s: float | None = Field(None, ge=0)
    other_cpu_cores: float | None = Field(
        None, ge=0, description="CPU time other processes on the host used during the point ÷ its wall time: the "
                                "cores they kept busy (profiler/contention.py)")
    gpu_other_processes: int | None = Field(
        None, ge=0, description="processes other than the engine that NVML lists on its GPUs (None: not read)")
    decode_step_medians_s: list[float] = Field([], description="median decode step of each repeat")
    decode_steps_per_repeat: float | None = None
    output_tokens_per_s: float = Field(ge=0)
    mean_context: float = Field(ge=0, description="prompt_len + output_len / 2: mean KV length during decode")
    requests_measured: int = Field(ge=0)
    model_bytes_per_decode_step: float | None = Field(None, description="weights + KV bytes the analytic model says "
                                                                        "one decode step reads")
    model_weight_bytes_per_decode_step: float | None = None
    model_kv_bytes_per_decode_step: float | None = None
    model_implied_bandwidth_Bps: float | None = Field(None, description="model bytes ÷ measured decode step")
    model_bandwidth_note: str | None = None
    engine_s: float | None = Field(None, description="seconds inside vLLM calls during the point")


class PredictedCeiling(BaseModel):
    """The analysis model's batch ceiling for the engine's real block count (analysis.vllm.allocator)."""

    model_config = ConfigDict(extra="allow")

    ceiling: int = Field(ge=0)
    limited_by: str
    vllm_reported: float = Field(description="what vLLM's own 'maximum concurrency' arithmetic implies")


class SaturationMeasurements(BaseModel):
    """One batch at a fixed length, past the predicted ceiling, watched step by step."""

    model_config = ConfigDict(extra="forbid")

    concurrency: int = Field(gt=0)
    factor: float | None = Field(None, gt=0)
    predicted: PredictedCeiling
    peak_running: int = Field(ge=0)
    peak_waiting: int = Field(0, ge=0)
    preemptions: int = Field(ge=0)
    preempted_requests: int = Field(ge=0)
    peak_kv_cache_usage_perc: float = Field(ge=0)
    ran_together: bool = Field(description="every request decoded at once, no preemption")
    output_tokens: int = Field(ge=0)
    output_tokens_per_s: float | None = Field(ge=0, description="generated tokens ÷ time inside engine steps")
    engine_step_s: float | None = None
    wall_s: float | None = None
    steps: int | None = None
    timeline_columns: list[str] = []
    timeline: list[list[float | None]] = []
    engine_s: float | None = None


class LatencyStats(BaseModel):
    """One latency over a serve point's requests, as vLLM's benchmark client computes it (seconds)."""

    model_config = ConfigDict(extra="forbid")

    mean_s: float | None = Field(None, ge=0)
    median_s: float | None = Field(None, ge=0)
    std_s: float | None = Field(None, ge=0)
    p50_s: float | None = Field(None, ge=0)
    p90_s: float | None = Field(None, ge=0)
    p99_s: float | None = Field(None, ge=0)


class ServeRequests(BaseModel):
    """Per request of a serve point (successful ones, in the client's order): what the percentiles
    and goodput are computed from, kept so any SLO can be applied afterwards."""

    model_config = ConfigDict(extra="forbid")

    ttft_s: list[float] = []
    e2el_s: list[float] = Field([], description="request latency: sent to last token")
    input_len: list[int] = []
    output_len: list[int] = []
    start_s: list[float] = Field([], description="when each request was sent, from the first one")


class ServeMeasurements(BaseModel):
    """A serve point: vLLM's benchmark client (``vllm.benchmarks.serve``) against the OpenAI server.

    * **TTFT** — from sending the request to its first streamed token (queueing, prefill and the
      HTTP/detokenization path included).
    * **TPOT** — per request ``(latency − TTFT) / (output tokens − 1)``; statistics over requests.
    * **ITL** — every gap between two streamed chunks, over all requests.
    * **E2EL** — sending to the last token.
    * **throughput** — completed requests, or output tokens, ÷ the benchmark's duration.
    * **goodput** — requests per second that met every SLO in ``slo`` (None without SLOs).
    The statistics are vLLM's own numbers (what ``vllm bench serve`` prints), in seconds.
    """

    model_config = ConfigDict(extra="forbid")

    load_generator: str = Field(description="the client and its version, e.g. 'vllm.benchmarks.serve 0.32.0'")
    duration_s: float = Field(gt=0)
    completed: int = Field(ge=0)
    failed: int = Field(ge=0)
    total_input_tokens: int = Field(ge=0)
    total_output_tokens: int = Field(ge=0)
    request_throughput: float = Field(ge=0)
    output_tokens_per_s: float = Field(ge=0)
    total_tokens_per_s: float = Field(ge=0)
    request_goodput: float | None = Field(None, ge=0)
    slo: dict[str, float] = Field({}, description="'ttft_s', 'tpot_s', 'e2el_s' → the bound goodput counts against")
    ttft: LatencyStats
    tpot: LatencyStats
    itl: LatencyStats
    e2el: LatencyStats
    max_concurrent_requests: float | None = Field(None, description="the client's peak requests in flight")
    mean_context: float = Field(ge=0, description="prompt_len + output_len / 2: mean KV length during decode")
    errors: list[str] = Field([], description="the first failed requests' errors")
    requests: ServeRequests = ServeRequests()
    client_cpu_s: float | None = Field(None, ge=0, description="CPU seconds of the load generator's process")
    client_wall_s: float | None = Field(None, gt=0, description="wall seconds of the load generator's run")
    client_cpu_share: float | None = Field(None, ge=0, description="client_cpu_s / client_wall_s: 1.0 is one core "
                                                                   "busy the whole point")
    server_counters: dict[str, float | None] = Field(
        {}, description="rise of the server's /metrics counters over the point (preemptions, prefix-cache hits "
                        "and queries, prompt and generation tokens); null where a counter is missing or reset")
class PointEnergy(BaseModel):
    """A device's energy over a point's window [started_at, finished_at] (profiler/telemetry/energy.py): a GPU's NVML
    counter, or its power samples integrated, or the host's CPU packages' RAPL counter, each interpolated at both
    ends of the window."""

    energy_j: float | None = None
    energy_method: str | None = Field(None, description="how energy_j was measured, or why it was not")
    idle_power_w: float | None = Field(None, description="draw before the engine started (the launch's baseline)")
    energy_above_idle_j: float | None = Field(None, description="energy_j less idle_power_w over the window")
    window_s: float | None = Field(None, description="the point's window the energy covers (seconds)")


class GpuPointTelemetry(PointEnergy):
    """NVML aggregates of one GPU over a point's samples (null: not available, never zero)."""

    model_config = ConfigDict(extra="forbid")

    samples: int
    peak_mem_used_bytes: float | None = None
    mean_mem_used_bytes: float | None = None
    peak_engine_mem_bytes: float | None = None
    mean_gpm_dram_bw_pct: float | None = None
    gpm_implied_dram_Bps: float | None = None
    gpm_windows: int | None = None
    gpm_partial_windows: bool | None = None
    mean_util_mem_busy_pct: float | None = None
    mean_gpm_sm_pct: float | None = None
    mean_gpm_tensor_pct: float | None = None
    mean_power_w: float | None = None
    peak_power_w: float | None = None
    mean_clock_sm_mhz: float | None = None
    mean_clock_mem_mhz: float | None = None
    max_temperature_c: float | None = None
    throttled_seen: bool | None = None


class HostPointTelemetry(PointEnergy):
    model_config = ConfigDict(extra="forbid")

    samples: int
    peak_rss_bytes: float | None = None
    mean_rss_bytes: float | None = None
    mean_cpu_pct: float | None = None
    peak_sys_mem_used_bytes: float | None = None


class ServerPointTelemetry(BaseModel):
    """A served engine's /metrics samples over a point (device 'server'): how full its KV cache was,
    how many requests ran and queued, and what its counters rose by from the point's first sample to
    its last (null with under two samples, or when a counter went down: the server restarted)."""

    model_config = ConfigDict(extra="forbid")

    samples: int
    peak_kv_cache_usage: float | None = Field(None, description="vllm:kv_cache_usage_perc, 0..1, highest sample")
    mean_kv_cache_usage: float | None = None
    peak_requests_running: float | None = None
    peak_requests_waiting: float | None = Field(None, description="above 0: requests queued for a slot")
    preemptions: float | None = Field(None, description="rise of vllm:num_preemptions_total over the point")
    prefix_cache_hits: float | None = Field(None, description="rise of vllm:prefix_cache_hits_total (tokens)")
    prefix_cache_queries: float | None = Field(None, description="rise of vllm:prefix_cache_queries_total (tokens)")
    prefix_cache_hit_rate: float | None = Field(None, description="hits ÷ queries; null when nothing was queried")
    prompt_tokens: float | None = Field(None, description="rise of vllm:prompt_tokens_total")
    generation_tokens: float | None = Field(None, description="rise of vllm:generation_tokens_total")


_POINT_TELEMETRY_MODELS: dict[str, type[BaseModel]] = {"host": HostPointTelemetry, "server": ServerPointTelemetry}


class _PointBase(Record):
    id: str
    engine_id: str
    engine: EngineSettings
    point: PointSettings
    started_at: float | None = None
    finished_at: float | None = None
    telemetry: dict[str, HostPointTelemetry | GpuPointTelemetry | ServerPointTelemetry] | None = Field(
        None, description="device label → aggregates over the point's samples: 'host' is HostPointTelemetry, "
                          "'server' ServerPointTelemetry, any other label ('gpu0' …) GpuPointTelemetry")

    @field_validator("telemetry", mode="before")
    @classmethod
    def _telemetry_by_label(cls, value: Any) -> Any:
        """Each device's aggregates as the model its label names (their shapes can coincide: all-null
        aggregates are ``{"samples": n}`` in any of them)."""
        if not isinstance(value, dict):
            return value
        out = {}
        for label, agg in value.items():
            model = _POINT_TELEMETRY_MODELS.get(label, GpuPointTelemetry)
            if isinstance(agg, dict):
                try:
                    agg = model.model_validate(agg)
                except ValidationError as exc:
                    first = exc.errors()[0]
                    where = ".".join(map(str, first["loc"]))
                    raise ValueError(f"telemetry[{label!r}] is not {model.__name__}: "
                                     f"{where + ': ' if where else ''}{first['msg']}") from None
            elif isinstance(agg, BaseModel) and not isinstance(agg, model):
                raise ValueError(f"telemetry[{label!r}] must be {model.__name__}, not {type(agg).__name__}")
            out[label] = agg
        return out

    @model_validator(mode="after")
    def _ids(self) -> _PointBase:
        if self.id not in (self.point.id, self.point.legacy_id):  # a record kept from before ids hashed every field
            raise ValueError(f"id {self.id!r} is not the point's id {self.point.id!r}")
        if self.point.engine_id != self.engine_id:
            raise ValueError(f"engine_id {self.engine_id!r} is not the point's engine {self.point.engine_id!r}")
        return self


class DecodePoint(_PointBase):
    """``points/<id>.json`` of a decode point that ran."""

    status: Literal["ok"]
    measurements: DecodeMeasurements

    @model_validator(mode="after")
    def _phase(self) -> DecodePoint:
        if self.point.phase != "decode":
            raise ValueError(f"decode measurements on a {self.point.phase} point")
        return self


class SaturationPoint(_PointBase):
    """``points/<id>.json`` of a saturation point that ran."""

    status: Literal["ok"]
    measurements: SaturationMeasurements

    @model_validator(mode="after")
    def _phase(self) -> SaturationPoint:
        if self.point.phase != "saturation":
            raise ValueError(f"saturation measurements on a {self.point.phase} point")
        return self


class ServePoint(_PointBase):
    """``points/<id>.json`` of a serve point that ran."""

    status: Literal["ok"]
    measurements: ServeMeasurements

    @model_validator(mode="after")
    def _phase(self) -> ServePoint:
        if self.point.phase != "serve":
            raise ValueError(f"serve measurements on a {self.point.phase} point")
        return self


class FailedPoint(_PointBase):
    """``points/<id>.json`` of a point that did not produce measurements, and why."""

    status: FailureStatus
    error_class: FailureStatus
    message: str
    traceback: str | None = None
    log_tail: str | None = None


def _point_kind(v: Any) -> str:
    get = v.get if isinstance(v, dict) else lambda k, d=None: getattr(v, k, d)
    if get("status") != "ok":
        return "failed"
    point = get("point") or {}
    phase = point.get("phase") if isinstance(point, dict) else getattr(point, "phase", None)
    return phase if phase in ("saturation", "serve") else "decode"


PointRecord = Annotated[
    Annotated[DecodePoint, Tag("decode")] | Annotated[SaturationPoint, Tag("saturation")]
    | Annotated[ServePoint, Tag("serve")] | Annotated[FailedPoint, Tag("failed")],
    Discriminator(_point_kind),
]
AnyPoint = DecodePoint | SaturationPoint | ServePoint | FailedPoint
POINT_RECORD: TypeAdapter[AnyPoint] = TypeAdapter(PointRecord)


def load_point(path: str | Path, text: str | None = None) -> AnyPoint:
    """A point record, whichever kind, or ResultsError naming the file and the field."""
    path = Path(path)
    text = read_record_text(path) if text is None else text
    check_finite(text, path)
    try:
        return POINT_RECORD.validate_json(text)
    except ValidationError as exc:
        other = record_kind(text)
        if other not in (None, "a point record"):
            raise ResultsError(f"{path}: holds {other}, not a point record — a file copied or moved into the "
                               "wrong place") from None
        if exc.errors()[0]["type"] == "model_type":  # JSON, but no object: say so, not which kind it was tried as
            raise ResultsError(f"{path}: does not follow the point record contract: (whole record): Input should "
                               "be an object") from None
        raise ResultsError(f"{path}: does not follow the point record contract: {describe_errors(exc)}") from None
