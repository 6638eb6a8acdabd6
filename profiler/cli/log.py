"""`kvprof log`: what a vLLM start-up log says vLLM decided, beside kvprof's prediction."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from analysis import catalog
from analysis.model.architecture import UnsupportedArchitecture
from analysis.planning.plan import PlanError
from analysis.units import fmt_bytes, fmt_count
from profiler.cli.common import (
    console,
    fail,
    one_line,
)

_LOG_ROWS = (  # key, label, formatter
    ("vllm_version", "vLLM version", str),
    ("model", "model", str),
    ("tensor_parallel_size", "tensor parallel size", fmt_count),
    ("pipeline_parallel_size", "pipeline parallel size", fmt_count),
    ("gpu_memory_utilization", "gpu_memory_utilization", lambda x: f"{x:g}"),
    ("max_model_len", "max_model_len", fmt_count),
    ("max_num_batched_tokens", "max_num_batched_tokens", fmt_count),
    ("block_size", "block size", fmt_count),
    ("max_loras", "LoRA slots", fmt_count),
    ("max_lora_rank", "LoRA rank", fmt_count),
    ("weights_bytes", "weights", fmt_bytes),
    ("activation_peak_bytes", "activation peak", fmt_bytes),
    ("non_torch_bytes", "non-torch", fmt_bytes),
    ("cuda_graph_bytes", "CUDA graphs", fmt_bytes),
    ("available_kv_cache_bytes", "KV cache memory", fmt_bytes),
    ("num_gpu_blocks", "GPU blocks", fmt_count),
    ("kv_cache_tokens", "KV cache tokens", fmt_count),
    ("max_concurrency", "max concurrency", lambda x: f"{x:.2f}x"),
)


# What kvprof predicts (the other rows of the kvprof column are the log's settings, carried over).
_PREDICTED = ("weights_bytes", "num_gpu_blocks", "kv_cache_tokens", "max_concurrency")


def _log_table(rec: dict[str, Any]) -> Table:
    pred = rec.get("predicted")
    t = Table(title=f"vLLM start-up log: {rec['log_file']}", show_lines=False)
    t.add_column("")
    t.add_column("logged", justify="right")
    if pred:
        t.add_column(f"kvprof ({pred['catalog_model']})", justify="right")
        t.add_column("difference", justify="right")
    for key, label, fmt in _LOG_ROWS:
        logged = rec.get(key)
        row = [label, "—" if logged is None else fmt(logged)]
        if pred:
            p = pred.get(key)
            row.append("—" if p is None else fmt(p) + (" (assumed)" if key in pred.get("assumed", []) else ""))
            if key in _PREDICTED and isinstance(p, int | float) and isinstance(logged, int | float):
                d = p - logged
                pct = f" ({d / logged:+.1%})" if logged else ""
                text = (("+" if d >= 0 else "−") + fmt_bytes(abs(d))) if key.endswith("_bytes") else f"{d:+,g}"
                row.append(text + pct)
            else:
                row.append("")
        t.add_row(*row)
    return t


def log_cmd(
    file: Annotated[Path, typer.Argument(help="A vLLM server or engine log (the start-up part is enough).")],
    model: Annotated[str | None, typer.Option(
        "--model", "-m", help="Catalog name, model directory or config.json for the prediction "
                              "(default: the model the log names, if it is a catalog entry).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object (bytes per GPU).")] = False,
):
    """Say what vLLM decided at start-up (weights, reserve, KV budget, blocks), beside kvprof's prediction."""
    from analysis.planning.startup_log_check import LogInputError, predict, read_log, summarize

    try:
        rec = summarize(read_log(file), str(file))
        pred = predict(rec, model)
    except (LogInputError, PlanError, UnsupportedArchitecture, catalog.UnknownName, ValueError, OSError) as exc:
        raise fail(one_line(exc)) from None
    if pred is not None:
        rec["predicted"] = pred
    if json_out:
        print(json.dumps(rec, indent=2))
        return
    console.print(_log_table(rec))
    if rec.get("speculative_method"):
        pred = rec.get("predicted") or {}
        console.print(f"speculative decoding: {rec['speculative_method']}"
                      + (f" ({rec['speculative_model']})" if rec.get("speculative_model") else "")
                      + f", k={rec['num_speculative_tokens']}; "
                      + (pred.get("speculative_note") or (
                          "no drafter (n-gram proposals): weights and KV as without it"
                          if rec["speculative_method"] == "ngram"
                          else "the drafter's weights and KV layers are in the prediction")),
                      highlight=False)
    if rec.get("encoder_profile") or (rec.get("predicted") or {}).get("encoder_profile"):
        console.print(f"vision encoder profile: logged {rec.get('encoder_profile') or '—'}; kvprof "
                      f"{(rec.get('predicted') or {}).get('encoder_profile') or '—'}", highlight=False)
    if rec["reserve_bytes"] is not None:
        console.print(f"reserve outside weights and KV: {fmt_bytes(rec['reserve_bytes'])} ({rec['reserve_source']})",
                      highlight=False)
    for key, ranks in rec["rank_values"].items():
        fmt = fmt_bytes if key.endswith("_bytes") else fmt_count
        values = ", ".join(f"{r} {fmt(v)}" for r, v in ranks.items())
        console.print(f"ranks differ on {key} (rank 0's shown): {values}", highlight=False)
    if pred is None:
        console.print("no prediction: the log's model is not a catalog entry (give --model)", highlight=False)
    elif pred.get("num_gpu_blocks") is None:
        console.print("no capacity prediction: the log states no KV cache memory", highlight=False)
