"""`kvprof log`: what a vLLM start-up log says vLLM decided, beside kvprof's prediction.

``summarize`` turns a log into one flat record (bytes per GPU, ``None`` where the log is
silent). When the model's config is known — ``--model``, or the model the log names if
it is a catalog entry — ``predict`` puts kvprof's numbers for the same settings beside
it: with the KV budget and block size the log states, ``analysis.vllm.allocator.paged_capacity``
gives the blocks, token capacity and concurrency, ``analysis.model.params.model_loading_bytes`` the
weights. ``calibration_from_log`` turns a saved ``kvprof log --json`` into a
``kvprof plan --calibration`` (the reserve vLLM really kept outside weights and KV).

A log names a catalog model only when the HF repo's last part, less the fine-tune
suffixes that keep the architecture (``-Instruct``, ``-chat``, ``-hf``, ``-it``) and a
leading ``Meta-``, is the catalog name: ``meta-llama/Llama-3.1-8B-Instruct`` →
``llama-3.1-8b``; ``Meta-Llama-3-8B`` (no catalog entry) or ``Qwen2.5-7B-Instruct-AWQ``
(other weights) get no prediction.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from analysis.results.inputs import InputFileError, read_input
from analysis.vllm.lora import DEFAULT_MAX_LORA_RANK
from analysis.vllm.memory import rules_for
from analysis.vllm.startup_log import parse_startup

LOG_KIND = "kvprof log"
GiB = 2**30

# The record's keys, in the order the table shows them.
KEYS = ("vllm_version", "model", "tensor_parallel_size", "pipeline_parallel_size", "gpu_memory_utilization",
        "max_model_len",
        "max_num_batched_tokens", "block_size", "max_loras", "max_lora_rank", "weights_bytes", "activation_peak_bytes",
        "non_torch_bytes",
        "cuda_graph_bytes", "available_kv_cache_bytes", "num_gpu_blocks", "kv_cache_tokens", "max_concurrency")
# What makes a text a vLLM start-up log: at least one of these was found.
_EVIDENCE = ("model_loading_bytes", "weights_bytes_logged", "available_kv_bytes", "log_kv_cache_tokens",
             "log_num_gpu_blocks", "log_max_concurrency", "cuda_graph_bytes", "cuda_graph_estimate_bytes",
             "requested_memory_bytes", "vllm_version", "explicit_kv_bytes")
_FINE_TUNE_SUFFIXES = {"instruct", "chat", "hf", "it"}


MAX_LOG_BYTES = 1 << 30  # a start-up log is kilobytes; a whole server's day of logging stays under this


class LogInputError(ValueError):
    """A file that is not a readable vLLM log (the message says which and why)."""


def read_log(path: Path) -> str:
    """The text of a log file, or LogInputError for a missing file, a directory, binary or empty."""
    if not path.exists():
        raise LogInputError(f"{path}: no such file")
    if path.is_dir():
        raise LogInputError(f"{path}: is a directory, not a log file")
    try:
        data = read_input(path, MAX_LOG_BYTES)
    except InputFileError as exc:
        raise LogInputError(str(exc)) from None
    if not data.strip():
        raise LogInputError(f"{path}: empty file")
    if b"\x00" in data[:65536]:
        raise LogInputError(f"{path}: binary file, not a text log")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
        if sum(not (c.isprintable() or c.isspace()) for c in text[:65536]) > len(text[:65536]) // 10:
            raise LogInputError(f"{path}: binary file, not a text log") from None
        return text


def summarize(text: str, source: str = "log") -> dict[str, Any]:
    """What the log says vLLM decided (bytes per GPU; None where the log does not say)."""
    p = parse_startup(text)
    if not any(p.get(k) is not None for k in _EVIDENCE):
        raise LogInputError(f"{source}: no vLLM start-up lines found (weights, KV cache memory, GPU blocks, "
                            "KV cache size) — is this a vLLM server or engine log?")
    weights = p.get("weights_bytes_logged")
    if weights is None:
        weights = p.get("model_loading_bytes")
    out: dict[str, Any] = {
        "kind": LOG_KIND,
        "log_file": source,
        "vllm_version": p.get("vllm_version"),
        "model": p.get("model"),
        "tensor_parallel_size": p.get("tensor_parallel_size"),
        "pipeline_parallel_size": p.get("pipeline_parallel_size"),
        "gpu_memory_utilization": p.get("gpu_memory_utilization"),
        "max_model_len": p.get("max_model_len"),
        "max_num_batched_tokens": p.get("max_num_batched_tokens"),
        # the block the backends settled on where the log says ("Setting kv cache block size to 64"), else the set one
        "block_size": p.get("log_kv_block_size") or p.get("block_size"),
        "weights_bytes": weights,
        "activation_peak_bytes": p.get("peak_activation_bytes"),
        "non_torch_bytes": p.get("non_torch_bytes"),
        "cuda_graph_bytes": p.get("cuda_graph_bytes"),
        # --kv-cache-memory where the arguments state it (exact), else the logged GiB (to 0.01 GiB)
        "available_kv_cache_bytes": p.get("kv_cache_memory_bytes") or p.get("available_kv_bytes",
                                                                           p.get("explicit_kv_bytes")),
        "num_gpu_blocks": p.get("log_num_gpu_blocks"),
        "kv_cache_tokens": p.get("log_kv_cache_tokens"),
        "max_concurrency": p.get("log_max_concurrency"),
        # beyond the table: what a calibration and a reader need
        "max_num_seqs": p.get("max_num_seqs"),
        # --enable-lora's slots (vLLM's defaults where only enable_lora is logged: one slot of rank 16)
        "max_loras": (p.get("max_loras") or 1) if p.get("enable_lora") else None,
        "max_lora_rank": (p.get("max_lora_rank") or DEFAULT_MAX_LORA_RANK) if p.get("enable_lora") else None,
        "speculative_method": p.get("speculative_method"),
        "speculative_model": p.get("speculative_model"),
        "num_speculative_tokens": p.get("num_speculative_tokens"),
        # a multimodal model's encoder profile (V1): "N <modality> items, budget B tokens"
        "encoder_profile": (f"{p['encoder_profile_items']} {p['encoder_profile_modality']} "
                            f"item{'s' * (p['encoder_profile_items'] != 1)}, encoder budget "
                            f"{p['encoder_budget_tokens']:,} tokens") if p.get("encoder_profile_items") else None,
        "dtype": p.get("dtype"),
        "kv_cache_dtype": p.get("kv_cache_dtype"),
        # a hybrid recurrent model: the prefix cache and SSM state dtype it ran, the block vLLM raised attention's to
        "enable_prefix_caching": p.get("enable_prefix_caching"),
        "mamba_ssm_cache_dtype": p.get("mamba_ssm_cache_dtype"),
        "attention_block_size": p.get("log_attention_block_size"),
        "cuda_graph_estimate_bytes": p.get("cuda_graph_estimate_bytes"),
        "consumed_bytes": p.get("consumed_bytes"),
        "total_gpu_memory_bytes": p.get("total_gpu_memory_bytes"),
        "requested_memory_bytes": p.get("requested_memory_bytes"),
        "kv_cache_memory_requested_limit_bytes": p.get("kv_cache_memory_requested_limit_bytes"),
        "reserve_bytes": None,
        "reserve_source": None,
        "rank_values": p.get("rank_values", {}),
        "lines": p.get("raw_lines", {}),
    }
    kv = out["available_kv_cache_bytes"]
    if out["requested_memory_bytes"] is not None and weights is not None and kv is not None:
        out["reserve_bytes"] = out["requested_memory_bytes"] - weights - kv
        out["reserve_source"] = "requested memory − weights − KV cache memory, as logged"
    elif out["activation_peak_bytes"] is not None and out["non_torch_bytes"] is not None:
        out["reserve_bytes"] = out["activation_peak_bytes"] + out["non_torch_bytes"] + (out["cuda_graph_bytes"] or 0)
        out["reserve_source"] = "activation peak + non-torch + CUDA graphs, as logged"
    return out


def catalog_match(model: str | None) -> str | None:
    """The catalog model a logged model path or HF repo names (None when none truly matches)."""
    from analysis import catalog
    if not model:
        return None
    parts = [x for x in re.split(r"[\\/]", model.strip().strip("'\"")) if x]
    if not parts:
        return None
    name = parts[-1]
    for part in parts:  # the HF cache layout: models--org--name/snapshots/<hash>
        if part.startswith("models--"):
            name = part.split("--")[-1]
    tokens = [t for t in name.lower().split("-") if t not in _FINE_TUNE_SUFFIXES]
    if tokens and tokens[0] == "meta":
        tokens = tokens[1:]
    candidate = "-".join(tokens)
    return candidate if candidate in catalog.model_names() else None


def predict(record: dict[str, Any], model_ref: str | None = None) -> dict[str, Any] | None:
    """kvprof's numbers for the logged settings, or None without a known architecture.

    Blocks, token capacity and concurrency come from the logged KV budget (none without
    one; a negative budget — the model did not fit — is 0 blocks, as vLLM reports);
    block size 16 (vLLM's CUDA default) and max_num_batched_tokens = max_model_len
    where the log does not state them; tensor parallelism 1 likewise.
    """
    from analysis import catalog
    from analysis.model.kv import KV_DTYPES
    from analysis.model.params import model_loading_bytes
    from analysis.vllm.allocator import paged_capacity
    from analysis.vllm.budget import default_reserve
    from analysis.vllm.pipeline import stage, stages

    ref = model_ref
    if ref is None:
        matched = catalog_match(record.get("model"))
        if matched is None:
            return None
        ref = catalog.CATALOG_PREFIX + matched  # the catalog's entry, whatever folder the cwd holds
    arch, _ = catalog.resolve_model(ref)
    if arch.recurrent is not None and record.get("mamba_ssm_cache_dtype") not in (None, "auto"):
        arch = arch.model_copy(update={"recurrent": arch.recurrent.model_copy(
            update={"ssm_cache_dtype": record["mamba_ssm_cache_dtype"]})})
    try:  # the dtype vLLM ran (auto downcasts a float32 checkpoint to 16 bits, as vLLM does)
        arch = arch.with_dtype(record.get("dtype") or "auto")
    except ValueError:
        arch = arch.with_dtype("auto")
    tp = record.get("tensor_parallel_size") or 1
    # the block the log gives, else vLLM's default (16; 64 for sparse attention, whose indexer takes no other)
    block = record.get("block_size") or (64 if arch.sparse_indexer is not None else 16)
    mml = record.get("max_model_len") or arch.max_position_embeddings
    kv_dtype = record.get("kv_cache_dtype") or "auto"
    if kv_dtype.lower() not in KV_DTYPES:
        kv_dtype = "auto"
    pp = record.get("pipeline_parallel_size") or 1
    parts = stages(arch, tp, pp, "") if pp > 1 else None
    drafter, draft_note = _drafter(record, arch, tp, kv_dtype, mml) if pp == 1 else (None, None)
    out: dict[str, Any] = {k: None for k in KEYS}
    out.update(model=arch.name, tensor_parallel_size=tp, pipeline_parallel_size=pp,
               gpu_memory_utilization=record.get("gpu_memory_utilization"), max_model_len=mml,
               max_num_batched_tokens=record.get("max_num_batched_tokens"), block_size=block,
               max_loras=record.get("max_loras"), max_lora_rank=record.get("max_lora_rank"),
               weights_bytes=parts[0].weight_bytes if parts else
               model_loading_bytes(arch, tp, max_num_batched_tokens=record.get("max_num_batched_tokens"))
               + (drafter.weight_bytes if drafter else 0) + _lora(record, arch, tp, out))
    if draft_note:
        out["speculative_note"] = draft_note
    if arch.vision is not None and mml:
        from analysis.model.vision import encoder_profile

        enc = encoder_profile(arch.vision, max_model_len=mml, max_num_batched_tokens=record.get(
            "max_num_batched_tokens") or 0, max_num_seqs=record.get("max_num_seqs") or 1024,
            dtype_bytes=arch.weight_dtype_bytes, tp=tp)
        if enc is not None:
            out["encoder_profile"] = (f"{enc.items} {enc.modality} item{'s' * (enc.items != 1)}, encoder budget "
                                      f"{enc.budget_tokens:,} tokens; peak {enc.peak_bytes / 2**30:.2f} GiB over "
                                      f"{enc.patches:,} patches")
    budget = record.get("available_kv_cache_bytes")
    if budget is not None and mml:
        mnbt = record.get("max_num_batched_tokens") or mml

        def capacity(a: Any, kv: int) -> Any:
            return paged_capacity(a, max(kv, 0), block_size=block, max_model_len=mml, max_num_batched_tokens=mnbt,
                                  kv_cache_dtype=kv_dtype, tp=tp,
                                  prefix_caching=record.get("enable_prefix_caching"),
                                  extra_bytes_per_block=block * drafter.kv_bytes_per_token if drafter else 0)

        if parts is None:
            cap = capacity(arch, budget)
        else:
            # The log's budget is rank 0's; every other stage has its own weights and (the last) the sampler's
            # peak, and the pool is the smallest stage's: rank 0's budget moved by those differences.
            seqs = record.get("max_num_seqs") or 1024

            def act(last: bool) -> int:
                return default_reserve(arch, max_num_batched_tokens=mnbt, max_num_seqs=seqs, tp=tp,
                                       vllm_version=record.get("vllm_version"), samples=last,
                                       max_model_len=mml).activation_bytes

            first = act(False)
            cap = min((capacity(stage(arch, st.start, st.start + st.layers),
                                budget + parts[0].weight_bytes - st.weight_bytes + first - act(st.last))
                       for st in parts), key=lambda c: c.num_blocks)
        out.update(available_kv_cache_bytes=budget, num_gpu_blocks=cap.num_blocks,
                   kv_cache_tokens=cap.logged_tokens(rules_for(record.get("vllm_version")).kv_tokens_logged),
                   max_concurrency=round(cap.max_concurrency, 2),
                   bytes_per_block=cap.bytes_per_block)
    out["assumed"] = [k for k, v in (("block_size", record.get("block_size")),
                                     ("tensor_parallel_size", record.get("tensor_parallel_size")),
                                     ("max_model_len", record.get("max_model_len"))) if v is None]
    out["catalog_model"] = arch.name
    return out


def _lora(record: dict[str, Any], arch: Any, tp: int, out: dict[str, Any]) -> int:
    """The logged LoRA slots' buffers (allocated while the model loads, so "Model loading took" counts them);
    a note in ``out`` where the model's LoRA layers are not modelled."""
    from analysis.vllm.lora import LoraNotModelled, lora_bytes

    if not record.get("max_loras"):
        return 0
    try:
        return lora_bytes(arch, max_loras=record["max_loras"], max_lora_rank=record["max_lora_rank"], tp=tp)
    except LoraNotModelled as exc:
        out["lora_note"] = str(exc)
        return 0


def _drafter(record: dict[str, Any], arch: Any, tp: int, kv_dtype: str, mml: int | None) -> tuple[Any, str | None]:
    """The logged speculative drafter's memory (analysis.vllm.speculative), and a note where it cannot be
    counted (its draft model is not in the catalog, or the configuration is not planned)."""
    from analysis import catalog
    from analysis.vllm.speculative import SpeculativeConfig, SpeculativeNotModelled, drafter_memory

    method, k = record.get("speculative_method"), record.get("num_speculative_tokens")
    if not method or not k:
        return None, None
    draft_ref = record.get("speculative_model")
    draft = None
    if method in ("eagle", "eagle3", "draft_model"):
        matched = catalog_match(draft_ref)
        if matched is None:
            return None, (f"speculative {method} drafter {draft_ref!r} is not in the catalog: its weights and KV "
                          "layers are not counted")
        draft = catalog.resolve_model(catalog.CATALOG_PREFIX + matched)[0].with_dtype(arch.torch_dtype)
    try:
        spec = SpeculativeConfig(method=method, model=draft.name if draft else None, num_speculative_tokens=k)
        # max_num_seqs only sizes ngram's token history, part of the reserve: the logged budget already holds it
        return drafter_memory(arch, spec, draft, tp=tp, kv_cache_dtype=kv_dtype, max_num_seqs=1,
                              max_model_len=mml or 1), None
    except (ValueError, SpeculativeNotModelled) as exc:
        return None, f"speculative {method}: {exc}; its drafter is not counted"


def calibration_from_log(record: dict[str, Any], gpu: Any = None, source: str = "log") -> Any:
    """A ``kvprof plan`` Calibration whose reserve is what vLLM kept outside weights and KV.

    The log's reserve is ``requested − weights − KV`` on the device vLLM saw. kvprof plans
    from the catalog's cudaMemGetInfo total (``cuda_total_mib``), which can differ from the total
    this log's driver reported by a few tens of MiB; with a GPU given, that difference ×
    utilization is added, so ``total × utilization − weights − reserve`` lands on the logged KV budget.
    """
    from analysis.planning.plan import Calibration

    reserve = record.get("reserve_bytes")
    if reserve is None:
        raise LogInputError(f"{source}: the log states no reserve (requested memory, weights and KV budget, "
                            "or activation + non-torch) — nothing to calibrate")
    note = record.get("reserve_source") or "as logged"
    total, util = record.get("total_gpu_memory_bytes"), record.get("gpu_memory_utilization")
    if gpu is not None and not getattr(gpu, "cpu", False) and total and util:
        extra = int((gpu.cuda_total_bytes - total) * util)
        reserve += extra
        note += f"; {extra / GiB:+.2f} GiB: ({gpu.name} catalog CUDA total − logged total) × {util}"
    return Calibration(reserve_bytes=max(int(reserve), 0), source=f"vLLM start-up log {source} ({note})",
                       log_available_kv_cache_bytes=record.get("available_kv_cache_bytes"))
