"""`kvprof probe`: this machine's ceilings (copy bandwidth, matmul FLOP/s, decode attention)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from analysis.units import fmt_bytes
from profiler.cli.common import (
    console,
    fail,
    one_line,
)


def probe_cmd(
    out: Annotated[Path | None, typer.Option("--out", help="Also write the result here (JSON).")] = None,
    device: Annotated[str, typer.Option("--device", help="auto, cpu, cuda or cuda:N.")] = "auto",
    quick: Annotated[bool, typer.Option("--quick", help="Smaller sizes, fewer repeats.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
):
    """Measure this machine's ceilings: copy bandwidth, bf16 matmul FLOP/s, decode attention."""
    from profiler.probe import ProbeUnavailable, run_probe
    from profiler.store import atomic_write_json

    try:
        result = run_probe(device, quick)
    except ProbeUnavailable as exc:  # no torch on this machine
        raise fail(str(exc)) from None
    except (RuntimeError, ValueError) as exc:  # e.g. --device cuda without a GPU
        raise fail(f"--device {device}: {one_line(exc)}") from None
    if out:
        atomic_write_json(out, result)
    if json_out:
        print(json.dumps(result, indent=2))
        return
    copy, mm = result["copy"], result["matmul_bf16"]
    t = Table(title=f"kvprof probe: {result['device']} (torch {result['torch_version']})")
    t.add_column("measurement")
    t.add_column("median", justify="right")
    t.add_column("p25 – p75", justify="right")
    bw, fl = copy["bandwidth_Bps"], mm["flops_per_s"]
    t.add_row(f"copy {fmt_bytes(copy['bytes_moved'] // 2)} (read + write)",
              f"{bw['median'] / 1e9:,.1f} GB/s", f"{bw['p25'] / 1e9:,.1f} – {bw['p75'] / 1e9:,.1f}")
    t.add_row(f"bf16 matmul {mm['n']}³", f"{fl['median'] / 1e12:,.2f} TFLOP/s",
              f"{fl['p25'] / 1e12:,.2f} – {fl['p75'] / 1e12:,.2f}")
    for row in result["decode_attention"]:
        s = row["seconds"]
        t.add_row(f"attention batch {row['batch']} × {row['context']:,} tok",
                  f"{s['median'] * 1e6:,.0f} µs ({row['kv_bandwidth_Bps']['median'] / 1e9:,.0f} GB/s)",
                  f"{s['p25'] * 1e6:,.0f} – {s['p75'] * 1e6:,.0f} µs")
    console.print(t)
    if out:
        console.print(f"written to {out}")
