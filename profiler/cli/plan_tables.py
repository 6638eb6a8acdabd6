"""The tables `kvprof plan` prints, rendered in one place: the plan (two columns, or one value a quantity under
``NARROW_COLUMNS``), the procurement table as a capacity and a latency table that each fit 80 columns, and the
energy-and-cost table. The command (profiler/cli/plan.py) parses the options and prints what these return."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.markup import escape
from rich.table import Table

from analysis.latency.intervals import INTERVAL_MEANING
from analysis.planning.cost import Pricing
from analysis.planning.plan_schema import Plan
from analysis.units import fmt_bytes, fmt_count, fmt_seconds

# Below this many columns (a pipe, CI, a narrow terminal) the plan is one value a quantity, not two columns
NARROW_COLUMNS = 110


def plan_table(p: Plan, width: int | None = None) -> Table:
    """The plan as a table: a column of the seeds' ideal arithmetic beside vLLM's; narrower than
    ``NARROW_COLUMNS``, one value a quantity: vLLM's, the ideal one in brackets where it differs or stands alone."""
    narrow = width is not None and width < NARROW_COLUMNS
    t = Table(title=f"kvprof plan — {p.model} ({p.attention})"
              + (f" on {p.gpu}" if p.gpu else "") + f", tp={p.tensor_parallel_size}"
              + (f", pp={p.pipeline_parallel_size}" if p.pipeline_stages else ""),
              box=box.SIMPLE_HEAD if narrow else box.HEAVY_HEAD)
    t.add_column("quantity")
    if narrow:
        t.add_column(escape("vLLM [ideal: seed arithmetic]"), justify="right")
    else:
        t.add_column("ideal (seed arithmetic; roofline)", justify="right")
        t.add_column("vLLM (paged allocator; latency model)", justify="right")

    def row(label: str, ideal: str = "", paged: str = "") -> None:
        if not narrow:
            t.add_row(label, ideal, paged)
        elif paged and ideal and paged != ideal:
            t.add_row(label, escape(f"{paged} [{ideal}]"))
        else:
            t.add_row(label, paged or (escape(f"[{ideal}]") if ideal else ""))

    row("weights per GPU" + (" (stage 0)" if p.pipeline_stages else ""), fmt_bytes(p.weight_bytes),
        fmt_bytes(p.weight_bytes))
    if p.lora_bytes is not None:
        row("  of which LoRA slots", "", fmt_bytes(p.lora_bytes))
    if (sp := p.speculative) is not None:
        row(f"  of which the {sp.method} drafter (k={sp.num_speculative_tokens})", "",
            fmt_bytes(sp.draft_weight_bytes))
        row("  drafter KV bytes / token (its layers in every block)", "", f"{sp.draft_kv_bytes_per_token:,} B")
        row("  slots a request holds past its context (1 + k + lookahead)", "", str(sp.slots_beyond_context))
    for st in p.pipeline_stages or []:
        pool = " (sets the pool)" if st.stage == p.pool_stage else ""
        row(f"  stage {st.stage}: layers {st.first_layer}–{st.first_layer + st.layers - 1}{pool}", "",
            f"weights {fmt_bytes(st.weight_bytes)}, activation {fmt_bytes(st.activation_bytes)}, "
            f"KV {fmt_bytes(st.kv_budget_bytes)}, {fmt_count(st.num_blocks)} blocks")
    row("KV bytes / token (all layers)", f"{p.kv_bytes_per_token:,} B")
    row(f"KV bytes / sequence @ {p.context:,} tok", fmt_bytes(p.kv_bytes_per_sequence))
    row("KV budget per GPU", fmt_bytes(p.kv_budget_bytes), fmt_bytes(p.kv_budget_bytes))
    row(f"block ({p.kv_block_size:,} tok, all layers of a group)", "", f"{p.bytes_per_block:,} B")
    row("blocks", "", fmt_count(p.num_blocks))
    groups = ", ".join(f"{g.kind}×{g.layers}:{g.blocks_per_request}" for g in p.kv_cache_groups)
    row("blocks reserved per request", "", f"{p.blocks_per_request:,} ({groups})")
    row("KV cache tokens", fmt_count(p.ideal_kv_cache_tokens), fmt_count(p.kv_cache_tokens))
    row(f"max concurrency @ {p.max_model_len:,} tok", *(
        "—" if c is None else f"{c:.2f}x" for c in (p.ideal_max_concurrency, p.max_concurrency)))
    row(f"sequences of {p.context:,} tok that fit (null block excluded)", "", fmt_count(p.kv_full_batch))
    if (off := p.kv_offloading) is not None:
        reach = ("not planned (LMCache sizes its own store)" if off.offloaded_kv_tokens is None else
                 f"{fmt_count(off.offloaded_kv_tokens)} tokens ({fmt_count(off.offloaded_sequences)} sequences)")
        row(f"KV offloaded to CPU ({off.backend}, {off.size_gib:g} GiB pinned)", "",
            f"prefix cache beyond the GPU: {reach}; runs at once: {fmt_count(off.gpu_resident_sequences)}")
    if p.crossover_context is not None:
        row("crossover context t* (KV read = weight read)", fmt_count(p.crossover_context))
    if p.ridge_point is not None:
        row("ridge point", f"{p.ridge_point:.0f} FLOP/B")
    def with_range(t: float, iv: list[float] | None) -> str:
        return fmt_seconds(t) + (f" ({fmt_seconds(iv[0])}–{fmt_seconds(iv[1])})" if iv else "")

    if p.decode_step_s is not None:
        bound = p.decode_bound + ("" if p.decode_bound in ("memory", "compute") else " term largest")
        row(f"decode step (batch {p.batch}; {bound})", "", with_range(p.decode_step_s,
                                                                          p.decode_step_interval_s))
        for k, v in (p.decode_terms or {}).items():
            if v:
                row(f"  {k.removesuffix('_s')}", "", fmt_seconds(v))
        if p.tpot_s is not None:
            row(f"  time per output token ({p.decode_tokens_per_step:g} tokens a step)", "",
                with_range(p.tpot_s, p.tpot_interval_s))
        row("decode throughput", "", f"{p.tokens_per_s:,.0f} tok/s")
        if p.decode_power_w is not None:
            iv = p.decode_power_interval_w
            row(f"board power per GPU (TDP {p.tdp_w:,.0f} W)", "", f"{p.decode_power_w:,.0f} W"
                + (f" ({iv[0]:,.0f}–{iv[1]:,.0f} W)" if iv else ""))
            jv = p.decode_j_per_output_token_interval
            row("energy per output token", "", f"{p.decode_j_per_output_token:.3g} J"
                + (f" ({jv[0]:.3g}–{jv[1]:.3g} J)" if jv else ""))
        if p.roofline_decode_step_s is not None:
            row(f"decode step, bare roofline ({p.roofline_decode_bound}-bound)", fmt_seconds(
                p.roofline_decode_step_s))
    if p.calibrated_decode_step_s is not None:
        row("decode step, calibrated", fmt_seconds(p.calibrated_decode_step_s))
        row("decode throughput, calibrated", f"{p.calibrated_tokens_per_s:,.0f} tok/s")
    if p.calibrated_decode_power_w is not None:
        row("board power per GPU, measured by the calibration", f"{p.calibrated_decode_power_w:,.0f} W")
        row("energy per output token, calibrated", f"{p.calibrated_j_per_output_token:.3g} J")
    if p.prefill_s is not None:
        row(f"prefill of {p.prompt_len:,} tokens", fmt_seconds(p.roofline_prefill_s), fmt_seconds(p.prefill_s))
    if p.ttft_s is not None:
        row(f"time to first token ({p.ttft_running_sequences} others decoding)", "",
            with_range(p.ttft_s, p.ttft_interval_s))
    if p.served_tpot_s is not None:
        row(f"served TPOT ({p.request_concurrency} in flight, {p.prompt_len:,} in / {p.output_len:,} out)",
            "", with_range(p.served_tpot_s, p.served_tpot_interval_s))
    if p.burst_ttft_s is not None:
        row(f"TTFT, {p.request_concurrency} prompts at once (a closed loop's waves; mean, median "
            f"{fmt_seconds(p.burst_ttft_median_s)})", "",
            with_range(p.burst_ttft_s, p.burst_ttft_interval_s))
    if p.request_latency_s is not None:
        row("request latency (TTFT + TPOT × the rest)", "",
            with_range(p.request_latency_s, p.request_latency_interval_s))
    if p.bench_latency_s is not None:
        row(f"vllm bench latency (batch {p.request_concurrency}, {p.prompt_len:,} in / {p.output_len:,} out)",
            "", with_range(p.bench_latency_s, p.bench_latency_interval_s))
    if p.accounting_rules:
        t.caption = (f"accounting rules: {p.accounting_rules}; {p.entry} defaults: "
                     f"max_num_batched_tokens {p.max_num_batched_tokens:,}, max_num_seqs {p.max_num_seqs:,}")
    if p.decode_step_interval_s:
        t.caption = ((t.caption + "\n") if t.caption else "") + (
            f"(ranges): {INTERVAL_MEANING} (--json: *_checked_against)")
    return t


def procurement_tables(model: str, rows: list[Any]) -> tuple[Table, Table, list[str]]:
    """The procurement table as two tables that each fit an 80-column terminal — capacity (what fits where) and
    latency (the predicted figures with their intervals) — and numbered notes (why a row does not fit)."""
    first = rows[0]
    cal = any(r.calibration_note for r in rows)
    tp_head = "tp×pp" if any(r.pipeline_parallel_size > 1 for r in rows) else "tp"
    slos = ", ".join(x for x in (f"TPOT ≤ {fmt_seconds(first.tpot_slo_s)}" if first.tpot_slo_s else "",
                                 f"TTFT ≤ {fmt_seconds(first.ttft_slo_s)}" if first.ttft_slo_s else "") if x)
    notes: list[str] = []
    note_of: dict[int, str] = {}
    for i, r in enumerate(rows):
        if not r.fits and r.reason:
            if r.reason not in notes:
                notes.append(r.reason)
            note_of[i] = f"[{notes.index(r.reason) + 1}]"

    def table(title: str, cols: list[str]) -> Table:
        t = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 0), title_justify="left")
        for c in cols:
            t.add_column(c, justify="left" if c in ("GPU", "") else "right", no_wrap=True)
        return t

    def pct(x: float | None) -> str:
        return "—" if x is None else f"{100 * x:,.0f}%"

    def g(r: Any, k: str) -> Any:
        return getattr(r, f"calibrated_{k}") if cal and getattr(r, f"calibrated_{k}", None) is not None \
            else getattr(r, k)

    cap = table(f"{model}: {first.concurrency:,} sequences of {first.context:,} tokens" + (f", {slos}" if slos else "")
                + (" (calibrated)" if cal else "") + "; GiB per GPU",
                ["#", "GPU", tp_head, "weights", "KV/GPU", "N×T needs", "fit@T", "repl.", "GPUs", ""])
    spec = first.speculative_tokens_per_step
    lat = table(f"predicted latency; range: {INTERVAL_MEANING}; "
                f"TTFT of a {first.prompt_len or first.context:,}-token prompt (its range in --json)"
                + (f"; speculative decoding at {spec:g} tokens a step (ranges widened to its published runs)"
                   if spec else ""),
                ["#", "GPU", tp_head, "batch", "TPOT ms" if first.served_tpot or spec else "step ms", "range",
                 "TTFT ms", "tok/s/GPU", "bound"])

    def num(v: float) -> str:
        return f"{v:,.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"

    def ms(x: float | None) -> str:
        return "—" if x is None else num(1e3 * x)

    def span(iv: list[float] | None) -> str:
        return "—" if not iv else f"{num(1e3 * iv[0])}–{num(1e3 * iv[1])}"

    def size(r: Any) -> str:
        """tp, or tp×pp for a pipeline."""
        return str(r.tensor_parallel_size) + (f"×{r.pipeline_parallel_size}" if r.pipeline_parallel_size > 1 else "")

    def gib(x: float | None) -> str:
        return "—" if x is None else f"{x / 2**30:,.1f}"

    for i, r in enumerate(rows):
        rank = str(r.rank) if r.rank else "—"
        cap.add_row(rank, r.gpu, size(r), gib(r.weight_bytes), gib(g(r, "kv_budget_bytes")),
                    pct(g(r, "kv_fraction_needed")), fmt_count(g(r, "sequences_fit")),
                    fmt_count(g(r, "replicas")), fmt_count(g(r, "gpus_needed")), note_of.get(i, ""))
        if r.fits:
            step_iv = None if cal and r.calibrated_decode_step_s is not None else r.decode_step_interval_s
            tok = g(r, "tokens_per_s_per_gpu")
            lat.add_row(rank, r.gpu, size(r), fmt_count(g(r, "batch")),
                        ms(g(r, "decode_step_s")), span(step_iv), ms(r.ttft_s),
                        "—" if tok is None else f"{tok:,.0f}",
                        r.decode_bound or ("pp: —" if r.pipeline_parallel_size > 1 else "—"))
    return cap, lat, notes


def cost_table(rows: list[Any], pricing: Pricing) -> tuple[Table | None, list[str]]:
    """Energy and cost of the configurations that fit (80 columns): board power per GPU, the deployment's kW,
    joules and USD per million output tokens with their ranges, and where each price comes from (notes). None
    where no row has a power or a price."""
    fitting = [r for r in rows if r.fits and (r.power_w_per_gpu is not None or r.usd_per_gpu_hour is not None)]
    if not fitting:
        return None, []
    t = Table(title="energy and cost: boards only (not hosts or cooling); USD per million output tokens = price per "
                    "GPU-hour" + (" + electricity" if pricing.power_usd_per_kwh else "") + " ÷ tokens per GPU-hour",
              box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 0), title_justify="left")
    for c in ("#", "GPU", "tp", "W/GPU", "kW", "J/token", "$/GPU-h", "$/M tok", "range", "price"):
        t.add_column(c, justify="left" if c in ("GPU", "price") else "right", no_wrap=True)
    sources: list[str] = []

    def num(v: float | None, digits: int = 2) -> str:
        return "—" if v is None else f"{v:,.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.{digits}f}"

    for r in fitting:
        if r.price_source and r.price_source not in sources:
            sources.append(r.price_source)
        iv = r.usd_per_million_tokens_interval
        t.add_row(str(r.rank), r.gpu, str(r.tensor_parallel_size), num(r.power_w_per_gpu), num(r.kw),
                  num(r.j_per_output_token, 3), num(r.usd_per_gpu_hour), num(r.usd_per_million_tokens),
                  "—" if not iv else f"{num(iv[0])}–{num(iv[1])}",
                  f"[{sources.index(r.price_source) + 1}]" if r.price_source else "—")
    notes = [f"[{i}] {s}" for i, s in enumerate(sources, 1)]
    if pricing.power_usd_per_kwh:
        notes.append(f"electricity: {pricing.power_usd_per_kwh:g} USD per kWh (--power-price)")
    return t, notes


def served_table(p: Plan) -> tuple[Table, list[str]] | None:
    """A replayed `vllm bench serve` load (``p.served``) as vllm bench prints it: each latency's mean and
    percentiles, then the throughput, the batch and queue, and what the replay was checked against."""
    sv = p.served
    if sv is None:
        return None
    o, w = sv.outcome, sv.outcome.workload
    if w.trace:
        load = (f"{w.num_requests:,} requests of {w.trace} (mean {w.prompt_len:,} + {w.output_len:,} tokens)"
                + (f" at {w.trace_speed:g}× its pace" if w.trace_speed != 1 else ""))
    else:
        load = (f"{w.num_requests:,} requests of {w.prompt_len:,} + {w.output_len:,} tokens, "
                + (f"{w.request_rate:g}/s" + (f" (burstiness {w.burstiness:g})" if w.burstiness != 1 else "")
                   if w.request_rate is not None else "all at once"))
    load += f", at most {w.max_concurrency:,} in flight" if w.max_concurrency is not None else ""
    t = Table(title=f"served, replayed through vLLM's scheduler: {load}", box=box.SIMPLE_HEAD)
    for name in ("ms", "mean", "median", "p90", "p99"):
        t.add_column(name, justify="left" if name == "ms" else "right")
    for label, d in (("TTFT", o.ttft), ("TPOT", o.tpot), ("ITL", o.itl), ("end to end", o.e2el)):
        t.add_row(label, *(f"{v * 1e3:,.1f}" if v is not None else "—"
                           for v in (d.mean_s, d.median_s, d.p90_s, d.p99_s)))
    lo, hi = sv.ttft_median_interval_s
    notes = [f"throughput {o.output_tokens_per_s:,.0f} output tok/s, {o.request_throughput:,.2f} req/s over "
             f"{o.duration_s:,.1f} s; running {o.mean_running:,.1f} on average (at most {o.max_running:,}), "
             f"{o.max_waiting:,} waiting at most, {o.preemptions:,} preemptions",
             f"median TTFT interval {lo * 1e3:,.1f}–{hi * 1e3:,.1f} ms"
             + (f", mean TPOT {sv.tpot_mean_interval_s[0] * 1e3:,.2f}–{sv.tpot_mean_interval_s[1] * 1e3:,.2f} ms"
                if sv.tpot_mean_interval_s else "") + " (10th–90th percentile of measured ÷ replayed)",
             *(f"checked against {text}" for text in sv.checked_against.values())]
    return t, notes


def served_rows_table(rows: list[Any]) -> Table | None:
    """The procurement rows' replayed closed loops (``kvprof procure --served``): median and p99 TTFT and TPOT."""
    replayed = [r for r in rows if r.served_ttft_median_s is not None]
    if not replayed:
        return None
    t = Table(title="served, replayed: each row's batch in flight on one replica (ms)", box=box.SIMPLE_HEAD)
    for name in ("#", "GPU", "tp", "batch", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99"):
        t.add_column(name, justify="left" if name in ("#", "GPU") else "right")

    def ms(v: float | None) -> str:
        return "—" if v is None else f"{v * 1e3:,.1f}"

    for r in replayed:
        t.add_row(str(r.rank or ""), r.gpu, str(r.tensor_parallel_size), f"{r.batch:,}", ms(r.served_ttft_median_s),
                  ms(r.served_ttft_p99_s), ms(r.served_tpot_median_s), ms(r.served_tpot_p99_s))
    return t
