"""`kvprof models` and `kvprof gpus`: what the catalog holds."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from analysis import catalog
from profiler.cli.common import (
    console,
)


def models_cmd(json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False):
    """List the shipped model architectures."""
    from analysis.model.params import count_params

    rows = []
    for name in catalog.model_names():
        a, _ = catalog.resolve_model(name)
        p = count_params(a)
        rows.append({
            "name": name, "model_type": a.model_type, "attention": a.attention_kind,
            "layers": a.num_layers, "hidden_size": a.hidden_size, "heads": a.num_heads,
            "kv_heads": a.num_kv_heads, "head_dim": a.head_dim,
            "sliding_layers": a.num_sliding_layers, "sliding_window": a.sliding_window,
            # a hybrid's layers with a recurrent state instead of a KV cache (Mamba2, gated DeltaNet)
            "recurrent": a.recurrent.kind if a.recurrent else None, "recurrent_layers": a.num_recurrent_layers,
            "moe_experts": a.moe.num_experts if a.moe else None,
            "params_total": p.total, "params_active": p.active,
        })
    if json_out:
        print(json.dumps(rows, indent=2))
        return
    t = Table(title="Model architectures (config facts; `kvprof plan --model NAME`)")
    for col in ("name", "type", "attn", "layers", "d_model", "heads/kv", "head_dim", "window",
                "params (B)", "active (B)"):
        t.add_column(col, justify="left" if col in ("name", "type", "attn") else "right")
    for r in rows:
        window = f"{r['sliding_window']} ×{r['sliding_layers']}" if r["sliding_window"] else "—"
        attn = f"{r['attention']}+{r['recurrent']}×{r['recurrent_layers']}" if r["recurrent"] else r["attention"]
        t.add_row(r["name"], r["model_type"], attn, str(r["layers"]), str(r["hidden_size"]),
                  f"{r['heads']}/{r['kv_heads']}", str(r["head_dim"]), window,
                  f"{r['params_total'] / 1e9:.2f}", f"{r['params_active'] / 1e9:.2f}")
    console.print(t)


def gpus_cmd(json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False):
    """List the GPU spec sheets."""
    table = catalog.gpus()
    if json_out:
        print(json.dumps([g.model_dump() | {"ridge_point": g.ridge_point} for g in table.values()], indent=2))
        return
    t = Table(title="GPU spec sheets (dense tensor throughput)")
    for col in ("name", "device", "memory (GiB)", "bandwidth (TB/s)", "bf16 (TFLOP/s)",
                "fp8 (TFLOP/s)", "ridge (FLOP/B)", "TDP (W)", "USD/GPU-h"):
        t.add_column(col, justify="left" if col in ("name", "device") else "right")
    for g in table.values():
        t.add_row(g.name, g.display, f"{g.memory_mib / 1024:.1f}", f"{g.bandwidth_tbs:.3f}",
                  f"{g.bf16_tflops:g}", f"{g.fp8_tflops:g}" if g.fp8_tflops else "—", f"{g.ridge_point:.0f}",
                  f"{g.tdp_w:g}" if g.tdp_w else "—",
                  f"{g.price_usd_per_hour:.2f}" if g.price_usd_per_hour else "—")
    console.print(t)
    console.print("prices: one cloud list price per GPU, each with its provider, source and date in --json "
                  "(price_source); `kvprof plan --price GPU=USD` replaces them", highlight=False)
