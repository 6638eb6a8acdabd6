"""Rendering of the multi-run comparison: compare.pdf and compare.md for a ``Comparison`` of several runs,
in the single-run report's style."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
from matplotlib.backends.backend_pdf import PdfPages

from analysis.measured.comparison import REFERENCE_CONTEXT, Comparison
from analysis.measured.serve import level_text
from analysis.report.pdf import PAGE, atomic_pdf, save_page, table_page, text_page
from analysis.results.schema import atomic_write_bytes
from analysis.table import Table, fbw, fms, fnum, format_columns, fpct


def tables(cmp: Comparison) -> dict[str, Table]:
    t: dict[str, Table] = {}
    runs = [r.label for r in cmp.runs]
    spec = {a: (a.replace("_", " "), str if a in ("model", "kv_cache_dtype") else fnum) for a in cmp.align_on}
    for r in runs:
        spec[f"kv_tokens[{r}]"] = (f"KV tokens {r}", fnum)
        spec[f"max_concurrency[{r}]"] = (f"max conc. {r}", fnum)
        spec[f"seqs_at_{REFERENCE_CONTEXT // 1024}K[{r}]"] = (f"seqs @{REFERENCE_CONTEXT // 1024}K {r}", fnum)
        spec[f"kv_fraction_of_memory[{r}]"] = (f"KV share of memory {r}", lambda x: fpct(x).lstrip("+"))
    for r in runs[1:]:
        spec[f"kv_tokens {r}/{runs[0]}"] = (f"tokens {r}/{runs[0]}", lambda x: fnum(x, 4))
    t["capacity"] = Table("KV capacity per aligned engine configuration", format_columns(cmp.capacity, spec),
                          note="Aligned on the axes the runs share; ratios are measured engine facts (vLLM's "
                               "kv_cache_size_tokens) of each run over the first.")
    t["fits"] = Table("Fitted decode efficiency and divergence from theory per run", format_columns(cmp.fits, {
        "run": ("run", str), "bw_eff_Bps": ("BW_eff", fbw), "mbu_spec": ("MBU vs spec", fpct),
        "mbu_probe": ("MBU vs probe", fpct), "overhead_s": ("overhead", fms), "r2": ("R²", lambda x: fnum(x, 3)),
        "roofline_spec_median_abs_error": ("roofline (spec) |error|", fpct),
        "roofline_probe_median_abs_error": ("roofline (probe) |error|", fpct),
        "claims_hold": ("claims hold", fnum), "claims_diverge": ("claims diverge", fnum)}))
    if not cmp.throughput.empty:
        wide = cmp.throughput.pivot(index="concurrency", columns="run", values="tokens_per_s_per_gpu").reset_index()
        t["throughput"] = Table("Decode throughput per GPU (median over contexts)", format_columns(
            wide, {"concurrency": ("batch", fnum)} | {r: (f"tokens/s/GPU {r}", fnum) for r in runs}))
    if not cmp.serve.empty:
        sv = cmp.serve.assign(level=[level_text(r) for r in cmp.serve.to_dict("records")])
        cols = {a: (a.replace("_", " "), str if a in ("model", "kv_cache_dtype") else fnum)
                for a in cmp.align_on if a in sv}
        cols |= {"level": ("level", str), "prompt_len": ("prompt", fnum), "output_len": ("output", fnum),
                 "prefix_len": ("prefix", fnum)}
        for r in runs:
            cols |= {f"tpot_p50[{r}]": (f"TPOT p50 {r}", fms), f"ttft_p50[{r}]": (f"TTFT p50 {r}", fms),
                     f"tokens_per_s[{r}]": (f"tokens/s {r}", fnum)}
        for r in runs[1:]:
            cols |= {f"tpot_p50 {r}/{runs[0]}": (f"TPOT {r}/{runs[0]}", lambda x: fnum(x, 4)),
                     f"ttft_p50 {r}/{runs[0]}": (f"TTFT {r}/{runs[0]}", lambda x: fnum(x, 4)),
                     f"tokens_per_s {r}/{runs[0]}": (f"tokens/s {r}/{runs[0]}", lambda x: fnum(x, 4))}
        t["serve"] = Table("Served latency and throughput per aligned serve point", format_columns(sv, cols),
                           note="Serve points aligned on the engine axes the runs share and on their workload "
                                "(level, lengths, shared prefix, arrival shape); ratios are each run over the first.")
    diff = [{"what": k, **{r.label: str(v) for r, v in zip(cmp.runs, vals, strict=True)}}
            for k, vals in {**cmp.differing_facts, **cmp.differing_axes}.items()]
    t["differs"] = Table("What differs between the runs", pd.DataFrame(diff))
    only = [{"run": k, "engine configurations only in this run": "; ".join(v)} for k, v in cmp.only_in.items()]
    t["only"] = Table("Engine configurations present in one run only", pd.DataFrame(only))
    return t


def _plots(pdf: PdfPages, cmp: Comparison) -> None:
    d = cmp.decode
    if not d.empty:
        fig, ax = plt.subplots(figsize=PAGE)
        sns.lineplot(data=d, x="mean_context", y=d["decode_step_s"] * 1e3, hue="run", style="concurrency",
                     markers=True, ax=ax, errorbar=None)
        ax.set_xlabel("mean context during decode (tokens)")
        ax.set_ylabel("decode step time (ms)")
        fig.suptitle("Decode step time vs context, runs overlaid (one line style per batch)", fontsize=13,
                     fontweight="bold", x=0.02, ha="left")
        save_page(pdf, fig)
    if not cmp.throughput.empty:
        fig, ax = plt.subplots(figsize=PAGE)
        sns.lineplot(data=cmp.throughput, x="concurrency", y="tokens_per_s_per_gpu", hue="run", marker="o", ax=ax)
        ax.set_xlabel("batch (concurrent sequences)")
        ax.set_ylabel("output tokens/s per GPU")
        fig.suptitle("Throughput vs concurrency per run", fontsize=13, fontweight="bold", x=0.02, ha="left")
        save_page(pdf, fig)
    cap = cmp.capacity
    cols = [c for c in cap.columns if c.startswith("kv_tokens[")]
    if cols:
        long = cap.melt(id_vars=cmp.align_on, value_vars=cols, var_name="run", value_name="kv_tokens")
        long["run"] = long["run"].str.slice(len("kv_tokens["), -1)
        long["config"] = long[cmp.align_on].astype(str).agg(" ".join, axis=1) if cmp.align_on else "all"
        fig, ax = plt.subplots(figsize=PAGE)
        sns.barplot(data=long, y="config", x="kv_tokens", hue="run", ax=ax, orient="h")
        ax.set_xlabel("KV cache tokens (vLLM)")
        ax.set_ylabel(" / ".join(cmp.align_on))
        fig.suptitle("KV capacity per aligned engine configuration", fontsize=13, fontweight="bold", x=0.02,
                     ha="left")
        save_page(pdf, fig)


def build_comparison(cmp: Comparison, out_dir: str | Path, pdf_path: str | Path | None = None) -> dict[str, Path]:
    """Write compare.pdf and compare.md for a comparison; return their paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    pdf_path = Path(pdf_path) if pdf_path else out_dir / "compare.pdf"
    t = tables(cmp)
    runs_lines = [f"{r.label}: {r.res.root} ({r.res.manifest.get('name')}, {len(r.res.engines)} engines, "
                  f"{int((r.res.points['status'] == 'ok').sum()) if not r.res.points.empty else 0} points ok)"
                  + ("  [SYNTHETIC]" if r.res.synthetic else "") for r in cmp.runs]
    with atomic_pdf(pdf_path) as pdf:
        text_page(pdf, "kvprof compare — " + " vs ".join(r.label for r in cmp.runs),
                  [("Runs", runs_lines), ("Which is better, and by how much", cmp.verdict)])
        table_page(pdf, t["differs"])
        table_page(pdf, t["capacity"])
        _plots(pdf, cmp)
        if "throughput" in t:
            table_page(pdf, t["throughput"])
        if "serve" in t:
            table_page(pdf, t["serve"])
        table_page(pdf, t["fits"])
        if not t["only"].frame.empty:
            table_page(pdf, t["only"])
    md = out_dir / "compare.md"
    parts = ["# kvprof compare — " + " vs ".join(r.label for r in cmp.runs) + "\n",
             "## Runs\n\n" + "\n".join(f"- {x}" for x in runs_lines) + "\n",
             "## Which is better, and by how much\n\n" + "\n".join(f"- {x}" for x in cmp.verdict) + "\n"]
    parts += [t[k].markdown() for k in ("differs", "capacity", "throughput", "serve", "fits", "only") if k in t]
    atomic_write_bytes(md, "\n".join(parts).encode())  # an interrupted compare leaves the previous one whole
    return {"pdf": pdf_path, "markdown": md}
