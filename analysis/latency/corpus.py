"""The corpus of published vLLM latency measurements on real GPUs (issue #25).

One YAML file per published measurement in ``analysis/catalog/latency/``: where it
was published, what the author ran (only what the source states; anything not
stated is left out, never guessed), the workload, the numbers it reports as
printed, and a verbatim excerpt so every transcription can be checked against its
source. The latency model's constants are fitted on these records
(``analysis.latency.fit``) and every plan is held against them (``tests``).

Three kinds of measurement (``workload.benchmark``):

* ``latency``: ``vllm bench latency`` / ``benchmarks/benchmark_latency.py``: ``batch_size``
  prompts of ``input_len`` tokens submitted together, each generating ``output_len``
  tokens; the average end-to-end latency of the batch. The batch decodes together.
* ``serve``: ``vllm bench serve`` / ``benchmarks/benchmark_serving.py`` (or another
  OpenAI-API client) at a fixed ``max_concurrency``: TPOT, ITL and TTFT of requests with
  fixed ``input_len`` / ``output_len``, or lengths drawn uniformly below them (``range_ratio``, as InferenceX and
  vLLM's client before 0.10 draw them: the average request is planned).
* ``throughput``: a table of decode tokens/s at a stated batch and lengths (offline).

How a per-step decode figure is read off a record is ``derive``: ``tpot`` / ``itl`` (the
reported time per output token is the step), ``latency`` (the average latency less the
predicted prefill, over ``output_len − 1`` steps), ``throughput`` (batch ÷ output tokens/s). A latency run
generating one token each (``--output-len 1``) has no decode step: it measures the batch's prefill, a TTFT of
``batch_size`` prompts submitted together (``prefill``).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from analysis.catalog import CATALOG_DIR
from analysis.catalog.evidence import PublishedRecord

LATENCY_DIR = CATALOG_DIR / "latency"

Benchmark = Literal["latency", "serve", "throughput"]
Derive = Literal["tpot", "itl", "latency", "throughput", "prefill"]


class LatencySettings(BaseModel):
    """What the author ran: only what the source states."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="the model as the source names it (a Hugging Face id or a path)")
    catalog_model: str = Field(description="analysis/catalog/models/<name> holding that checkpoint's config.json")
    plan_quantization: str | None = Field(
        None, description="how kvprof quantizes `catalog_model` for this record: a vLLM --quantization name, or for "
                          "an AWQ/GPTQ checkpoint whose own config is not in the catalog awq/gptq (or their _marlin "
                          "kernels): a group-128 config of the bits `quantization` names (Int8: 8, else 4)")
    gpu: str = Field(description="analysis/catalog/gpus.yaml name of the GPU it ran on")
    tensor_parallel_size: int = Field(1, ge=1)
    vllm_version: str | None = None
    vllm_version_inferred: str | None = Field(
        None, description="where the source does not state its version: the one inferred from its date (notes say how)")
    dtype: str | None = None
    quantization: str | None = Field(None, description="the checkpoint's scheme or --quantization, as stated")
    kv_cache_dtype: str = "auto"
    enforce_eager: bool = False
    max_num_batched_tokens: int | None = Field(None, gt=0)
    max_num_seqs: int | None = Field(None, gt=0)
    enable_chunked_prefill: bool | None = None
    other_args: dict[str, str] = Field({}, description="any other argument the source states, as written")


class LatencyWorkload(BaseModel):
    """What was measured: the benchmark, its batch or concurrency, and the lengths."""

    model_config = ConfigDict(extra="forbid")

    benchmark: Benchmark
    batch_size: int | None = Field(None, ge=1, description="latency / throughput: sequences decoded together")
    max_concurrency: int | None = Field(None, ge=1, description="serve: requests in flight at most")
    request_rate: float | None = Field(None, gt=0, description="serve: requests/s (None: all at once, 'inf')")
    num_prompts: int | None = Field(None, ge=1)
    input_len: int = Field(ge=1, description="prompt tokens per request")
    output_len: int = Field(ge=1, description="generated tokens per request")
    dataset: str | None = Field(None, description="random, sonnet, … (fixed lengths, or uniform below them)")
    range_ratio: float | None = Field(
        None, gt=0, lt=1, description="lengths drawn uniformly in [range_ratio × L, L] for the stated L, as vLLM's "
                                      "benchmark_serving.py drew them before 0.10 and InferenceX's copy of it does "
                                      "(--random-range-ratio); None: every request at the stated lengths")

    @model_validator(mode="after")
    def _batch(self) -> LatencyWorkload:
        if self.benchmark in ("latency", "throughput") and self.batch_size is None:
            raise ValueError(f"a {self.benchmark} record states its batch_size")
        if self.benchmark == "serve" and self.max_concurrency is None:
            raise ValueError("a serve record states its max_concurrency (the requests in flight)")
        return self

    def _mean(self, n: int) -> int:
        return n if self.range_ratio is None else max(round(n * (1 + self.range_ratio) / 2), 1)

    @property
    def mean_input_len(self) -> int:
        """Prompt tokens of the average request (the stated length where lengths are fixed)."""
        return self._mean(self.input_len)

    @property
    def mean_output_len(self) -> int:
        return self._mean(self.output_len)

    @property
    def sequences(self) -> int:
        """Sequences decoding together: the batch, or the concurrency (capped by the prompts)."""
        n = self.batch_size if self.batch_size is not None else self.max_concurrency
        assert n is not None
        return min(n, self.num_prompts) if self.num_prompts else n


class LatencyReported(BaseModel):
    """The numbers the source reports, as printed (milliseconds where the source prints ms)."""

    model_config = ConfigDict(extra="forbid")

    avg_latency_s: float | None = Field(None, gt=0, description="latency: 'Avg latency: X seconds'")
    mean_latency_ms: float | None = Field(None, gt=0, description="latency, where the source prints milliseconds "
                                                                  "(vLLM's CI tables: 'Mean latency (ms)')")
    median_tpot_ms: float | None = Field(None, gt=0)
    mean_tpot_ms: float | None = Field(None, gt=0)
    median_itl_ms: float | None = Field(None, gt=0)
    mean_itl_ms: float | None = Field(None, gt=0)
    median_ttft_ms: float | None = Field(None, gt=0)
    mean_ttft_ms: float | None = Field(None, gt=0)
    output_throughput_tok_s: float | None = Field(None, gt=0, description="generated tokens/s, all sequences")
    request_throughput_req_s: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _one_latency(self) -> LatencyReported:
        if self.avg_latency_s is not None and self.mean_latency_ms is not None:
            raise ValueError("avg_latency_s and mean_latency_ms are the same figure: give the one the source prints")
        return self

    @property
    def latency_s(self) -> float | None:
        """A latency run's average latency in seconds, whichever unit the source printed it in."""
        if self.avg_latency_s is not None:
            return self.avg_latency_s
        return None if self.mean_latency_ms is None else self.mean_latency_ms / 1e3


class LatencyRecord(PublishedRecord):
    """One published vLLM latency measurement on a real GPU."""

    settings: LatencySettings
    workload: LatencyWorkload
    reported: LatencyReported
    derive: Derive = Field(description="which reported figure gives the per-step decode time (module docstring)")

    @model_validator(mode="after")
    def _derivable(self) -> LatencyRecord:
        r = self.reported
        need = {"tpot": (r.median_tpot_ms, r.mean_tpot_ms), "itl": (r.median_itl_ms, r.mean_itl_ms),
                "latency": (r.latency_s,), "throughput": (r.output_throughput_tok_s,),
                "prefill": (r.latency_s,)}[self.derive]
        if all(v is None for v in need):
            raise ValueError(f"derive: {self.derive} needs the reported figure it is read from")
        if self.derive == "latency" and self.workload.output_len < 2:
            raise ValueError("derive: latency needs output_len >= 2 (the decode steps after the first token)")
        if self.derive == "prefill" and (self.workload.benchmark != "latency" or self.workload.output_len != 1):
            raise ValueError("derive: prefill is a latency run with output_len 1 (the batch's prefill alone)")
        return self

    @property
    def source_key(self) -> str:
        """The campaign a record came from, the unit leave-one-source-out cross-validation holds out together
        (:func:`campaign`): runs of one harness, machine room and vLLM build published as several pages are one
        source, so that a sibling page never stands in for the evidence held out."""
        return campaign(str(self.source))

    @property
    def ttft_ms(self) -> float | None:
        return self.reported.median_ttft_ms or self.reported.mean_ttft_ms


# Publications whose threads are each their own campaign: vLLM's issues and pull requests are written by different
# people on different machines, so each thread is one source.
PER_THREAD = ("github.com/vllm-project/vllm/",)


def campaign(url: str) -> str:
    """The campaign a source URL belongs to: a GitHub repository (its pages, files, commits and threads: one
    group's harness, e.g. the four CSVs of Argonne's LLM-Inference-Bench or silybench's BF16 and FP8 runs), a Hugging
    Face owner (one vendor's model cards, benchmarked alike), a CI pipeline (buildkite.com/<org>/<pipeline>: its builds
    are one script on one fleet); otherwise the URL without its fragment. vLLM's own threads stay one each
    (``PER_THREAD``)."""
    u = url.split("#", 1)[0].rstrip("/")
    bare = re.sub(r"^https?://(www\.)?", "", u)
    if any(bare.startswith(p) for p in PER_THREAD):
        return u
    parts = bare.split("/")
    keep = {"github.com": 3, "huggingface.co": 2, "buildkite.com": 3}.get(parts[0])
    return "https://" + "/".join(parts[:keep]) if keep and len(parts) >= keep else u


def vllm_version(s: LatencySettings) -> str | None:
    return s.vllm_version or s.vllm_version_inferred


@cache
def load_latency_corpus(directory: Path = LATENCY_DIR) -> dict[str, LatencyRecord]:
    """Every record, by file stem (validated; a bad file raises naming it)."""
    out: dict[str, LatencyRecord] = {}
    for path in sorted(directory.glob("*.yaml")):
        try:
            out[path.stem] = LatencyRecord.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
        except Exception as exc:
            raise ValueError(f"{path}: {exc}") from exc
    return out
