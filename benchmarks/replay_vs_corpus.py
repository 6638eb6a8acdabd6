"""The serving replay against the latency corpus's published `vllm bench serve` runs, beside the closed-form
schedules the plan uses today (issue #49), both held out by source.

    python benchmarks/replay_vs_corpus.py [-v] [--requests N] [--write]

For every serve record of analysis/catalog/latency/ that reports a TTFT or a TPOT/ITL: the step model's constants
are fitted without the record's source (leave-one-source-out, as analysis/latency/fit.py quotes its errors), then

* the closed form predicts the figure from its schedule (fit.record_targets: served_step_schedule,
  burst_ttft_schedule, queued_ttft_schedule …);
* the replay runs the record's workload (its concurrency, rate, lengths and prompt count; 1,000 prompts where the
  source does not say, as `vllm bench serve` defaults) through vLLM 0.32's scheduler, with the engine running at
  most what the record's engine held at once (fit.running_cap: max_num_seqs and the KV pool), and reads the same
  statistic (median or mean) of the same figure.

Prints each record's measured, closed-form and replayed figure, then the median absolute error of each, per figure
and for the records above capacity (queued). With --write, the replay's figures (count, median error, the 10th–90th
percentile of measured ÷ replayed) go to analysis/catalog/replay_evidence.yaml, which the plan quotes beside a
replayed figure. Exits 0; it measures, it does not gate.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict

import numpy as np

from analysis.latency.corpus import load_latency_corpus
from analysis.latency.fit import QUEUED, Problem, corpus_targets, prefix_cached, record_engine, running_cap
from analysis.latency.step import LatencyConstants, step_time
from analysis.serving.replay import ReplayEngine, ReplayError, bucketed, full_attention_blocks, replay
from analysis.serving.workload import ServedWorkload
from analysis.serving.workload import requests as drawn

BLOCK = 16


def served_workload(rec, requests: int | None) -> ServedWorkload:
    """The record's `vllm bench serve` load: old-style range ratios ([r·L, L]) as vLLM 0.10's centred ones."""
    wl = rec.workload
    n = wl.num_prompts or requests or 1000
    if wl.range_ratio is None:
        p, o, r = wl.input_len, wl.output_len, 0.0
    else:
        p, o = wl.mean_input_len, wl.mean_output_len
        r = (1 - wl.range_ratio) / (1 + wl.range_ratio)
    return ServedWorkload(num_requests=n, prompt_len=p, output_len=o, range_ratio=r, request_rate=wl.request_rate,
                          max_concurrency=wl.max_concurrency)


def replay_engine_of(rec, c: LatencyConstants) -> ReplayEngine:
    e = record_engine(rec)
    wl = rec.workload
    running = running_cap(rec, e)
    mml = wl.input_len + wl.output_len + 1
    per_seq = -(-mml // BLOCK)

    def step_s(d, ctx, p, prefix, ps):
        return step_time(e.step(decode_seqs=d, decode_context=ctx, prefill_tokens=p, prefill_prefix=prefix,
                                prefill_seqs=max(ps, 1) if p else None), c)

    chunked = e.chunked
    budget = e.max_num_batched_tokens or max(mml, 2048)
    return ReplayEngine(num_blocks=running * per_seq + 1, block_size=BLOCK, max_num_seqs=running,
                        max_num_batched_tokens=budget if chunked else max(budget, mml), max_model_len=mml,
                        chunked_prefill=chunked, prefix_caching=prefix_cached(rec),
                        blocks_at=full_attention_blocks(mml, BLOCK),
                        step_s=bucketed(step_s), api_s=c.value("api_s"))


def figures_of(name: str, rec, predicted: dict[tuple[str, str], float]) -> list[tuple[str, str, float, str]]:
    """The record's served figures: (ttft|tpot|itl, median|mean, measured seconds, the fit's target kind)."""
    r = rec.reported
    figures = []
    if r.median_ttft_ms or r.mean_ttft_ms:
        med = r.median_ttft_ms is not None
        figures.append(("ttft", "median" if med else "mean", (r.median_ttft_ms or r.mean_ttft_ms) / 1e3, "ttft"))
    tpot = r.median_tpot_ms or r.mean_tpot_ms or r.median_itl_ms or r.mean_itl_ms
    if tpot and (name, "decode") in predicted:
        med = (r.median_tpot_ms or r.median_itl_ms) is not None
        which = "tpot" if (r.median_tpot_ms or r.mean_tpot_ms) else "itl"
        figures.append((which, "median" if med else "mean", tpot / 1e3, "decode"))
    return figures


def served_records(records) -> list[str]:
    return [n for n, rec in sorted(records.items())
            if rec.workload.benchmark == "serve" and not any(k == "speculative" for k in rec.settings.other_args)]


def loso_fit(targets) -> tuple[dict[str, LatencyConstants], dict[tuple[str, str], float]]:
    """Constants fitted without each source, and each target's prediction by them."""
    problem = Problem(targets)
    full = problem.fit()
    loso: dict[str, LatencyConstants] = {}
    predicted: dict[tuple[str, str], float] = {}
    for src in sorted({t.source for t in targets}):
        held = np.array([t.source == src for t in targets])
        theta = problem.fit(np.flatnonzero(~held), start=full)
        pred = problem.predict(theta)
        for i in np.flatnonzero(held):
            predicted[(targets[i].record, targets[i].kind)] = float(pred[i])
        loso[src] = LatencyConstants(params=dict(zip(problem.names, theta.tolist(), strict=True)))
    return loso, predicted


def replay_targets(records, targets, loso, predicted, requests: int | None, fit_queued: bool):
    """The corpus's targets with every served figure's schedule taken from its replay (under the constants fitted
    without its source): the steps its requests' TTFT or TPOT spanned, weighted (analysis.serving.schedules)."""
    from analysis.latency.fit import Target
    from analysis.latency.step import Schedule, regime
    from analysis.serving.replay import StepTrace
    from analysis.serving.schedules import figure_weights

    by_key = {(t.record, t.kind): t for t in targets}
    replaced, out = set(), []
    for name in served_records(records):
        rec = records[name]
        figures = figures_of(name, rec, predicted)
        if not figures:
            continue
        w = served_workload(rec, requests)
        trace = StepTrace([], [])
        try:
            o = replay(replay_engine_of(rec, loso[rec.source_key]), w, per_request=True, trace=trace)
        except (ReplayError, ValueError):
            continue
        out_len = drawn(w).output_len
        e = record_engine(rec)
        for fig, stat, measured, kind in figures:
            weights = figure_weights(trace, o, out_len, "ttft" if fig == "ttft" else "tpot", stat)
            if not weights or (name, kind) not in by_key:
                continue
            s = Schedule(api=1.0 if fig == "ttft" else 0.0)
            for (d, ctx, p, prefix, ps), x in weights.items():
                s.add(x, e.step(decode_seqs=d, decode_context=ctx, prefill_tokens=p, prefill_prefix=prefix,
                                prefill_seqs=max(ps, 1) if p else None))
            old = by_key[(name, kind)]
            reg = old.regime if not (fit_queued and old.regime == QUEUED) else (
                "ttft" if kind == "ttft" else regime(e.a, e.tp))
            out.append(Target(name, old.source, kind, reg, measured, s))
            replaced.add((name, kind))
    return [t for t in targets if (t.record, t.kind) not in replaced] + out


def compare(records, loso, predicted, requests: int | None, verbose: bool, queued: set[str]):
    errors: dict[str, list[float]] = defaultdict(list)
    ratios: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for name in served_records(records):
        rec = records[name]
        figures = figures_of(name, rec, predicted)
        if not figures:
            continue
        try:
            o = replay(replay_engine_of(rec, loso[rec.source_key]), served_workload(rec, requests))
        except (ReplayError, ValueError) as exc:
            print(f"{name:58} skipped: {exc}")
            continue
        for fig, stat, measured, kind in figures:
            dist = getattr(o, fig)
            got = dist.median_s if stat == "median" else dist.mean_s
            closed = predicted.get((name, kind))
            if got is None or closed is None:
                continue
            e_replay, e_closed = abs(got / measured - 1), abs(closed / measured - 1)
            group = fig if fig != "itl" else "tpot"
            errors[f"{group} replay"].append(e_replay)
            ratios[group].append((measured / got, rec.source_key))
            errors[f"{group} closed"].append(e_closed)
            if name in queued:
                errors[f"{group} queued replay"].append(e_replay)
                errors[f"{group} queued closed"].append(e_closed)
            if verbose:
                print(f"{name:58} {fig:5} {stat:6} {measured * 1e3:9.1f} {closed * 1e3:9.1f} {got * 1e3:9.1f}")
    return errors, ratios


def summary(errors: dict[str, list[float]]) -> None:
    for key in sorted(errors):
        v = errors[key]
        print(f"{key:22} n={len(v):3}  median |error| {100 * statistics.median(v):5.1f} %  "
              f"within 25 %: {sum(x <= 0.25 for x in v)}/{len(v)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-v", action="store_true", help="every record, not only the summary")
    ap.add_argument("--requests", type=int, default=None, help="prompts where the record does not say (1,000)")
    ap.add_argument("--write", action="store_true", help="write analysis/catalog/replay_evidence.yaml")
    ap.add_argument("--refit", action="store_true", help="also fit the step model through the replay's schedules "
                                                         "(held out by source) and compare again")
    ap.add_argument("--fit-queued", action="store_true", help="with --refit: fit the queued figures too")
    args = ap.parse_args()
    records = load_latency_corpus()
    targets = corpus_targets(records)
    loso, predicted = loso_fit(targets)
    queued = {t.record for t in targets if t.regime == QUEUED}
    print(f"{'record':58} {'fig':5} {'stat':6} {'measured':>9} {'closed':>9} {'replay':>9}")
    errors, ratios = compare(records, loso, predicted, args.requests, args.v, queued)
    print()
    summary(errors)
    if args.write:
        write_evidence(ratios, errors)
    if args.refit:
        refit = replay_targets(records, targets, loso, predicted, args.requests, args.fit_queued)
        loso2, _ = loso_fit(refit)
        print("\nthe step model fitted through the replay's schedules, held out by source:")
        errors2, _ = compare(records, loso2, predicted, args.requests, args.v, queued)
        summary({k: v for k, v in errors2.items() if "replay" in k})
    return 0


def write_evidence(ratios: dict[str, list[tuple[float, str]]], errors: dict[str, list[float]]) -> None:
    import yaml

    from analysis.serving.evidence import EVIDENCE_FILE, FigureEvidence, ReplayEvidence, current_hashes

    constants, replay_code = current_hashes()
    figures = {}
    for fig in ("ttft", "tpot"):
        r = np.array([x for x, _ in ratios[fig]])
        figures[fig] = FigureEvidence(
            runs=len(r), sources=len({s for _, s in ratios[fig]}),
            median_abs_error=round(statistics.median(errors[f"{fig} replay"]), 4),
            closed_form_median_abs_error=round(statistics.median(errors[f"{fig} closed"]), 4),
            within_25_percent=sum(x <= 0.25 for x in errors[f"{fig} replay"]),
            ratio_p10=round(float(np.percentile(r, 10)), 4), ratio_p90=round(float(np.percentile(r, 90)), 4))
    ev = ReplayEvidence(command="python benchmarks/replay_vs_corpus.py --write", constants_sha256=constants,
                        replay_sha256=replay_code, figures=figures)
    EVIDENCE_FILE.write_text("# Written by benchmarks/replay_vs_corpus.py --write: do not edit.\n"
                             + yaml.safe_dump(ev.model_dump(mode="json"), sort_keys=False), encoding="utf-8")
    print(f"wrote {EVIDENCE_FILE}")


if __name__ == "__main__":
    sys.exit(main())
