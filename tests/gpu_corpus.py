"""The corpus of real GPU start-up logs that plans are held against (issue #14).

One YAML file per published vLLM start-up, in ``tests/fixtures/gpu_corpus/``:
where it was published, what the author ran (the settings the log or its post
states; anything not stated is left out, never guessed), and what vLLM logged,
transcribed as printed (GiB as the log prints them, rounded to 0.01 GiB or so).
``excerpt`` holds the log lines the numbers come from, verbatim, so a reader can
check every transcription against its source and the start-up log parser is
held against the same lines.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from analysis.catalog.evidence import PublishedRecord

CORPUS_DIR = Path(__file__).parent / "fixtures" / "gpu_corpus"


class CorpusSettings(BaseModel):
    """What the author ran. Only what the log or its post states."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="the model as the log names it (a Hugging Face id or a path)")
    catalog_model: str = Field(description="analysis/catalog/models/<name> holding that checkpoint's config.json")
    gpu: str = Field(description="analysis/catalog/gpus.yaml name of the GPU it ran on")
    vllm_version: str | None = None
    vllm_version_inferred: str | None = Field(
        None, description="where the log does not state its version: the one whose rules apply, inferred from "
                          "the post's date and the log's wording (the comment beside it says how)")
    entry: Literal["serve", "offline"] = Field(description="vllm serve / the OpenAI server, or the offline LLM class")
    tensor_parallel_size: int = Field(1, ge=1)
    pipeline_parallel_size: int = Field(1, ge=1)
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    max_model_len: int | None = Field(None, gt=0)
    max_num_seqs: int | None = Field(None, gt=0)
    max_num_batched_tokens: int | None = Field(None, gt=0)
    kv_cache_dtype: str = "auto"
    block_size: int | None = Field(None, gt=0)
    quantization: str | None = Field(None, description="the checkpoint's scheme (fp8, awq, gptq, mxfp4, "
                                                      "compressed-tensors, bitsandbytes) or --quantization")
    plan_quantization: str | None = Field(
        None, description="the --quantization kvprof plans this record with: for a quantized checkpoint whose own "
                          "config.json is not in the catalog, `catalog_model` is its base architecture and this "
                          "names the vLLM scheme with the same weight layout (the notes say why it is the same)")
    dtype: str | None = None
    enforce_eager: bool = False
    enable_prefix_caching: bool | None = None
    other_args: dict[str, str] = Field({}, description="any other argument the log states, as written")


class CorpusLogged(BaseModel):
    """What vLLM logged, as printed. GiB fields are the log's GiB (2**30 bytes) numbers."""

    model_config = ConfigDict(extra="forbid")

    weights_gib: float | None = Field(None, description="'Model loading took X GiB' (or 'weights_memory')")
    activation_peak_gib: float | None = Field(None, description="the profile run's peak activation memory")
    non_torch_gib: float | None = None
    cuda_graph_gib: float | None = Field(None, description="CUDA graph memory the log reports (actual or estimate)")
    total_gpu_memory_gib: float | None = Field(None, description="the total vLLM budgets against (cudaMemGetInfo)")
    available_kv_gib: float | None = Field(None, description="'Available KV cache memory'")
    num_gpu_blocks: int | None = None
    kv_cache_tokens: int | None = Field(None, description="'GPU KV cache size: N tokens'")
    max_concurrency: float | None = None
    max_concurrency_len: int | None = Field(None, description="the 'tokens per request' of the concurrency line")


class CorpusRecord(PublishedRecord):
    """One published vLLM start-up on a real GPU (``excerpt``: the log lines the numbers come from)."""

    settings: CorpusSettings
    logged: CorpusLogged


def vllm_version(settings: CorpusSettings) -> str | None:
    """The vLLM a record ran: stated, else inferred (None: unknown)."""
    return settings.vllm_version or settings.vllm_version_inferred


def load_corpus(directory: Path = CORPUS_DIR) -> dict[str, CorpusRecord]:
    """Every record, by file stem."""
    out = {}
    for path in sorted(directory.glob("*.yaml")):
        out[path.stem] = CorpusRecord.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
    return out
