"""The GPU start-up corpus (tests/fixtures/gpu_corpus/) on its own: every record is well formed, names a
catalog model and GPU, and the start-up log parser reads from its excerpt the numbers transcribed into it.

The last check is a transcription cross-check, not a parser test: the expected values are the record's
``logged`` fields, typed in by hand from the published log, and the parser reads the same lines
independently. A disagreement is either a typo in the record or a wording the parser misses; the
known misses are listed in ``PARSER_MISSES`` with the reason.
"""

from __future__ import annotations

import re

import pytest

from analysis.catalog import MODELS_DIR, UnknownName, resolve_gpu, resolve_model
from analysis.vllm.startup_log import parse_startup
from tests.gpu_corpus import CORPUS_DIR, CorpusRecord, load_corpus

G = 2**30  # vLLM prints bytes / 2**30 as "GiB" (and as "GB" before 0.7)

RECORDS = load_corpus()

# logged field -> the parser's fields that may carry it, first found wins
# (weights: "Model loading took" / "Loading model weights took" before the profile's "model weights take";
#  CUDA graphs: the measured pool before the estimate).
LOGGED_TO_PARSED: dict[str, tuple[str, ...]] = {
    "weights_gib": ("model_loading_bytes", "weights_bytes_logged"),
    "activation_peak_gib": ("peak_activation_bytes",),
    "non_torch_gib": ("non_torch_bytes",),
    "cuda_graph_gib": ("cuda_graph_bytes", "cuda_graph_estimate_bytes"),
    "total_gpu_memory_gib": ("total_gpu_memory_bytes",),
    "available_kv_gib": ("available_kv_bytes",),
    "num_gpu_blocks": ("log_num_gpu_blocks",),
    "kv_cache_tokens": ("log_kv_cache_tokens",),
    "max_concurrency": ("log_max_concurrency",),
    "max_concurrency_len": ("log_max_concurrency_len",),
}
GIB_FIELDS = {k for k in LOGGED_TO_PARSED if k.endswith("_gib")}

# settings the parser also reads from an engine-config / non-default-args / profile line
SETTINGS_TO_PARSED = {
    "vllm_version": "vllm_version", "tensor_parallel_size": "tensor_parallel_size",
    "gpu_memory_utilization": "gpu_memory_utilization", "max_model_len": "max_model_len",
    "max_num_seqs": "max_num_seqs", "max_num_batched_tokens": "max_num_batched_tokens",
    "kv_cache_dtype": "kv_cache_dtype", "block_size": "block_size",
}

# Catalog models the corpus names whose config.json is not in the catalog yet (no verbatim copy found in the
# stored sources): name -> the checkpoint. Their records are skipped by the resolution test, listing them.
MISSING_CATALOG_MODELS = {
    "llama-3.1-405b-fp8": "meta-llama/Llama-3.1-405B-Instruct-FP8",
    "deepseek-coder-v2-lite-awq": "TechxGenus/DeepSeek-Coder-V2-Lite-Instruct-AWQ",
    "gemma-3-4b": "google/gemma-3-4b-it",
    "qwen2.5-vl-72b": "Qwen/Qwen2.5-VL-72B-Instruct",
    "llama-3.2-11b-vision": "meta-llama/Llama-3.2-11B-Vision (mllama: cross-attention layers, not modelled)",
    "llama-3.1-8b-w8a8": "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8",
    "llama-3.1-8b-w4a16": "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16",
    "qwen2.5-7b-w8a8": "RedHatAI/Qwen2.5-7B-Instruct-quantized.w8a8",
    "qwen2.5-7b-fp8-dynamic": "RedHatAI/Qwen2.5-7B-Instruct-fp8-dynamic",
    "llama-3.3-70b-fp8-dynamic": "RedHatAI/Llama-3.3-70B-Instruct-fp8-dynamic",
    "llama-3.3-70b-w8a8": "RedHatAI/Llama-3.3-70B-Instruct-quantized.w8a8",
    "mistral-small-3.1-24b": "mistralai/Mistral-Small-3.1-24B-Instruct-2503",
    "mistral-small-3.1-24b-w8a8": "RedHatAI/Mistral-Small-3.1-24B-Instruct-2503-quantized.w8a8",
    "qwen2.5-72b": "Qwen/Qwen2.5-72B-Instruct",
    "qwen2-7b": "Qwen/Qwen2-7B-Instruct",
}

# Records whose excerpt the parser does not fully read, with the reason.
_MARKDOWN = "a markdown summary of the log (the author's wording, '**Model loading took:** X'), not log lines"
PARSER_MISSES = {
    "llmdbench_llama31_8b_h100": _MARKDOWN,
    "llmdbench_gpt_oss_20b_h100": _MARKDOWN,
    "llmdbench_gpt_oss_120b_h100": _MARKDOWN,
    "llmdbench_llama33_70b_fp8_dynamic_tp2_h100": _MARKDOWN,
    "llmdbench_llama33_70b_fp8_dynamic_h100": _MARKDOWN,
}


def _expected_parsed(value: float | int, field: str) -> int | float:
    """The parser's value for a transcribed number: GiB as bytes (its own int(x * 2**30)), counts as they are."""
    return int(value * G) if field in GIB_FIELDS else value


def test_corpus_is_not_empty_and_every_file_loads():
    files = sorted(CORPUS_DIR.glob("*.yaml"))
    assert len(files) == len(RECORDS) >= 10


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_record_is_well_formed(name):
    record = RECORDS[name]
    assert isinstance(record, CorpusRecord)
    assert re.fullmatch(r"[a-z0-9.]+(_[a-z0-9.]+){2,}", name), "file names are <source>_<model>_<gpu>"
    assert str(record.source).startswith("https://")
    assert record.excerpt.strip()
    assert any(v is not None for v in record.logged.model_dump().values()), "a record logs at least one number"


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_gpu_resolves(name):
    gpu, note = resolve_gpu(RECORDS[name].settings.gpu)
    assert note is None, "records name the exact catalog part, not a short name"
    assert gpu.name == RECORDS[name].settings.gpu


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_catalog_model_resolves(name):
    catalog_model = RECORDS[name].settings.catalog_model
    if catalog_model in MISSING_CATALOG_MODELS:
        with pytest.raises(UnknownName):
            resolve_model(catalog_model)
        pytest.skip(f"catalog model {catalog_model} ({MISSING_CATALOG_MODELS[catalog_model]}) has no config.json yet")
    arch, directory = resolve_model(catalog_model)
    assert directory.name == catalog_model and arch.num_layers > 0


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_parser_reads_the_transcribed_numbers(name):
    if name in PARSER_MISSES:
        pytest.xfail(PARSER_MISSES[name])
    record = RECORDS[name]
    parsed = parse_startup(record.excerpt)
    for field, candidates in LOGGED_TO_PARSED.items():
        value = getattr(record.logged, field)
        found = next((parsed[c] for c in candidates if parsed.get(c) is not None), None)
        if value is None:
            assert found is None, f"{field}: the excerpt states {found}, the record transcribes nothing"
        else:
            assert found == _expected_parsed(value, field), (field, value, found)
    for field, key in SETTINGS_TO_PARSED.items():
        if parsed.get(key) is not None:
            assert getattr(record.settings, field) == parsed[key], (field, parsed[key])


def test_parser_misses_are_real():
    """A listed miss that the parser now reads should leave the list."""
    for name in PARSER_MISSES:
        record = RECORDS[name]
        parsed = parse_startup(record.excerpt)
        transcribed = {f: getattr(record.logged, f) for f in LOGGED_TO_PARSED if getattr(record.logged, f) is not None}
        read = {f: next((parsed[c] for c in LOGGED_TO_PARSED[f] if parsed.get(c) is not None), None)
                for f in transcribed}
        assert any(read[f] != _expected_parsed(v, f) for f, v in transcribed.items()), name


def test_added_catalog_models_name_their_source():
    """Model directories added for the corpus carry the URL their config.json was copied from."""
    used = {r.settings.catalog_model for r in RECORDS.values()} - set(MISSING_CATALOG_MODELS)
    for name in sorted(used):
        source = MODELS_DIR / name / "SOURCE"
        if not source.exists():
            continue  # a directory that predates the corpus (the catalog's own)
        assert re.match(r"https://\S+", source.read_text().splitlines()[0]), name


def test_quantized_records_name_their_scheme():
    for name, record in RECORDS.items():
        if re.search(r"(fp8|awq|gptq|int4|int8|w8a8|w4a16|bnb|mxfp4|nvfp4)", record.settings.catalog_model):
            assert record.settings.quantization, name
