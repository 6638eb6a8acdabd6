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

WIDE = 120  # columns from which the full tables fit


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
    # below 120 columns (a pipe, CI, a narrow terminal) the names stay whole and the shape columns go (--json has all)
    narrow = console.width < WIDE
    t = Table(title="Model architectures (config facts; `kvprof plan --model NAME`)")
    t.add_column("name", no_wrap=True, min_width=max(len(r["name"]) for r in rows))
    cols = ("attn", "layers", "params (B)", "active (B)") if narrow else (
        "type", "attn", "layers", "d_model", "heads/kv", "head_dim", "window", "params (B)", "active (B)")
    for col in cols:
        t.add_column(col, justify="left" if col in ("type", "attn") else "right")
    for r in rows:
        window = f"{r['sliding_window']} ×{r['sliding_layers']}" if r["sliding_window"] else "—"
        attn = r["attention"]
        if r["recurrent"]:  # a hybrid's state layers; an attention-free model's are all there is
            state = f"{r['recurrent']}×{r['recurrent_layers']}"
            attn = state if r["attention"] == "attention-free" else f"{attn} + {state}"
        cells = {"type": r["model_type"], "attn": attn, "layers": str(r["layers"]), "d_model": str(r["hidden_size"]),
                 "heads/kv": f"{r['heads']}/{r['kv_heads']}", "head_dim": str(r["head_dim"]), "window": window,
                 "params (B)": f"{r['params_total'] / 1e9:.2f}", "active (B)": f"{r['params_active'] / 1e9:.2f}"}
        t.add_row(r["name"], *(cells[c] for c in cols))
    console.print(t)


def gpus_cmd(json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False):
    """List the GPU spec sheets."""
    table = catalog.gpus()
    if json_out:
        print(json.dumps([g.model_dump() | {"ridge_point": g.ridge_point} for g in table.values()], indent=2))
        return
    narrow = console.width < WIDE
    t = Table(title="GPU spec sheets (dense tensor throughput)")
    t.add_column("name", no_wrap=True, min_width=max(len(g.name) for g in table.values()))
    cols = (("GiB", "TB/s", "bf16 TF", "fp8 TF", "$/h") if narrow else
            ("device", "memory (GiB)", "bandwidth (TB/s)", "bf16 (TFLOP/s)", "fp8 (TFLOP/s)", "ridge (FLOP/B)",
             "TDP (W)", "USD/GPU-h"))
    for col in cols:
        t.add_column(col, justify="left" if col == "device" else "right")
    for g in table.values():
        values = [f"{g.memory_mib / 1024:.1f}", f"{g.bandwidth_tbs:.3f}", f"{g.bf16_tflops:g}",
                  f"{g.fp8_tflops:g}" if g.fp8_tflops else "—"]
        price = f"{g.price_usd_per_hour:.2f}" if g.price_usd_per_hour else "—"
        if narrow:
            t.add_row(g.name, *values, price)
        else:
            t.add_row(g.name, g.display, *values, f"{g.ridge_point:.0f}", f"{g.tdp_w:g}" if g.tdp_w else "—", price)
    console.print(t)
    console.print("prices: one cloud list price per GPU, each with its provider, source and date in --json "
                  "(price_source); `kvprof plan --price GPU=USD` replaces them", highlight=False)
