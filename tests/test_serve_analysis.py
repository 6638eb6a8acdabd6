"""Serve mode's analysis on hand-built records: load, served vs offline, load curves, frontier, ceiling, goodput,
prefix sharing. Expected values are the arithmetic written out here, never the code's own output."""

import json

import pytest
from records import (
    FACTS,
    HAVE_SERVER_TELEMETRY,
    SETTINGS,
    decode_point,
    engine_record,
    serve_point,
    server_record,
    write_run,
)

from analysis.catalog import model_dir
from analysis.load import LoadError, load
from analysis.pipeline import analyse
from analysis.results_schema import DecodeMeasurements, FailedPoint, PointSettings, ServeRequests, StartupLog
from analysis.serve_analysis import (
    analyse_serve,
    frontier,
    good_requests,
    goodput_table,
    load_curves,
    overhead_fit,
    prefix_sharing,
    served_ceiling,
    served_vs_offline,
)

needs_server_telemetry = pytest.mark.skipif(not HAVE_SERVER_TELEMETRY,
                                            reason="ServerPointTelemetry is not in this branch's contract yet")
CONFIG = json.loads((model_dir("tiny-llama-gqa") / "config.json").read_text())  # full attention, 4 layers


def engine(blocks: int = 512, **fields):
    """The offline engine with `blocks` KV blocks (block 32, max_model_len 1024, max_num_seqs 256)."""
    facts = FACTS.model_copy(update={"num_gpu_blocks": blocks, "kv_cache_size_tokens": blocks * 32})
    return engine_record(capacity=facts, config_json=CONFIG, **fields)


def offline(concurrency: int, step_ms: float, prompt_len: int = 64, output_len: int = 16):
    point = PointSettings(engine_id="e", phase="decode", concurrency=concurrency, prompt_len=prompt_len,
                          output_len=output_len, repeats=1, warmup=0)
    m = DecodeMeasurements(ttft_s=0.01, tpot_s=step_ms / 1e3, decode_step_s=step_ms / 1e3, output_tokens_per_s=1.0,
                           mean_context=prompt_len + output_len / 2, requests_measured=concurrency)
    return decode_point(concurrency=concurrency, id=point.id, point=point, measurements=m)


# --- load ---------------------------------------------------------------------------------------------

def test_load_builds_the_serve_and_servers_tables(tmp_path):
    s = serve_point(concurrency=4, tpot_ms=5.0, itl_ms=4.5, ttft_ms=20.0,
                    measurements={"server_counters": {"preemptions": 2.0, "prefix_cache_hits": None},
                                  "slo": {"tpot_s": 0.006}, "client_cpu_s": 0.5, "client_wall_s": 2.0,
                                  "client_cpu_share": 0.5 / 2.0})
    res = load(write_run(tmp_path, [engine(), server_record(), offline(4, 4.0), s]))
    assert len(res.serve) == 1 and len(res.servers) == 1
    row = res.serve.iloc[0]
    assert row["point_id"] == s.id and row["loop"] == "closed" and row["concurrency"] == 4
    assert row["tpot_p50_s"] == 0.005 and row["itl_median_s"] == 0.0045 and row["ttft_p99_s"] == 0.020
    assert row["e2el_p50_s"] == pytest.approx((20.0 + 5.0 * 15) / 1e3)  # ttft + tpot × (16 − 1)
    assert row["slo_tpot_s"] == 0.006 and row["client_cpu_share"] == 0.25
    assert row["counter_preemptions"] == 2.0 and row["counter_prefix_cache_hits"] is None
    assert row["prefix_len"] == 0 and row["range_ratio"] == 0 and row["num_gpu_blocks"] == 512
    srv = res.servers.iloc[0]
    assert srv["tokenizer_synthetic"] and "token boundaries are not the model's" in srv["tokenizer_note"]
    # The points table keeps every record (the serve point with its settings, no statistics columns of its own).
    assert set(res.points["phase"]) == {"decode", "serve"} and "tpot_p50_s" not in res.points


def test_a_run_without_serve_points_has_empty_serve_tables(tmp_path):
    res = load(write_run(tmp_path, [engine(), offline(4, 4.0)]))
    assert res.serve.empty and res.servers.empty and analyse_serve(res) is None
    assert "request_rate" not in res.points  # the points table gains no serve columns
    assert analyse(res).serve is None


def test_a_serve_only_sweep_loads_from_its_server_records(tmp_path):
    # phases: [serve] writes no engine record; the server record stands for the engine.
    res = load(write_run(tmp_path, [server_record(), serve_point(concurrency=2)]))
    assert res.engines.empty and len(res.serve) == 1 and not res.warnings


def test_an_off_contract_server_record_is_refused_with_file_and_field(tmp_path):
    write_run(tmp_path, [engine(), server_record()])
    path = tmp_path / "servers" / "e.json"
    rec = json.loads(path.read_text())
    rec["port"] = 70000
    path.write_text(json.dumps(rec))
    with pytest.raises(LoadError, match=r"servers/e\.json: does not follow the ServerRecord contract: port"):
        load(tmp_path)


def test_a_failed_serve_point_is_listed_with_the_failures(tmp_path):
    point = PointSettings(engine_id="e", phase="serve", concurrency=8, num_requests=8, prompt_len=64, output_len=16,
                          repeats=1, warmup=1)
    failed = FailedPoint(id=point.id, engine_id="e", engine=SETTINGS, point=point, status="crash",
                         error_class="crash", message="the server exited during the point")
    a = analyse(load(write_run(tmp_path, [engine(), server_record(), serve_point(concurrency=4), failed])))
    cells = a.tables["failed"].frame.to_dict("records")
    assert cells == [{"point": point.id, "status": "crash", "message": "the server exited during the point"}]


# --- (a) served vs offline ------------------------------------------------------------------------------

def test_served_tpot_and_itl_against_the_offline_step_at_the_same_batch(tmp_path):
    recs = [engine(), server_record(), offline(4, 4.0), serve_point(concurrency=4, tpot_ms=5.0, itl_ms=4.5),
            # not matched: a shared prefix, an open-loop rate, a batch the offline sweep did not run
            serve_point(concurrency=4, prefix_len=32, tpot_ms=9.0),
            serve_point(concurrency=None, request_rate=2.0, tpot_ms=9.0), serve_point(concurrency=8, tpot_ms=9.0)]
    res = load(write_run(tmp_path, recs))
    m = served_vs_offline(res.serve, res.points)
    assert len(m) == 1
    r = m.iloc[0]
    assert r["offline_step_s"] == 0.004 and r["served_tpot_s"] == 0.005
    assert r["tpot_overhead_s"] == pytest.approx(0.005 - 0.004)  # 1.0 ms
    assert r["tpot_overhead_ratio"] == pytest.approx(5.0 / 4.0 - 1)  # +25 %
    assert r["itl_overhead_s"] == pytest.approx(0.0045 - 0.004)  # 0.5 ms
    assert r["itl_overhead_ratio"] == pytest.approx(4.5 / 4.0 - 1)  # +12.5 %
    f = overhead_fit(m)
    assert f.n == 1 and f.slope is None and f.median_ratio == pytest.approx(0.25)
    assert "one matched point: the ratio only" in f.sentence


def test_the_overhead_fit_recovers_a_known_line(tmp_path):
    # served = 1.2 × offline + 0.5 ms at offline steps of 2, 3 and 4 ms: 2.9, 4.1 and 5.3 ms.
    recs = [engine(), server_record()]
    for c, step in ((1, 2.0), (2, 3.0), (4, 4.0)):
        recs += [offline(c, step), serve_point(concurrency=c, tpot_ms=1.2 * step + 0.5)]
    res = load(write_run(tmp_path, recs))
    f = overhead_fit(served_vs_offline(res.serve, res.points))
    assert f.n == 3
    assert f.slope == pytest.approx(1.2) and f.intercept_s == pytest.approx(0.5e-3) and f.r2 == pytest.approx(1.0)
    # overheads 0.9, 1.1 and 1.3 ms: median 1.1 ms; ratios 0.45, 0.3667, 0.325: median 0.3667
    assert f.median_overhead_s == pytest.approx(1.1e-3) and f.median_ratio == pytest.approx(4.1 / 3.0 - 1)


# --- (b) load curves, (c) frontier ------------------------------------------------------------------------

def test_load_curves_split_closed_and_open_loop(tmp_path):
    recs = [engine(), server_record(),
            serve_point(concurrency=8, ttft_ms=40.0, measurements={"ttft": {"p50_s": 0.04, "p90_s": 0.06,
                                                                            "p99_s": 0.09}}),
            serve_point(concurrency=2, ttft_ms=10.0),
            serve_point(concurrency=None, request_rate=4.0, ttft_ms=30.0),
            serve_point(concurrency=None, request_rate=1.0, ttft_ms=15.0)]
    closed, opened = load_curves(load(write_run(tmp_path, recs)).serve)
    assert closed["concurrency"].tolist() == [2, 8] and opened["request_rate"].tolist() == [1.0, 4.0]
    assert closed[["ttft_p50_s", "ttft_p90_s", "ttft_p99_s"]].iloc[1].tolist() == [0.04, 0.06, 0.09]
    assert opened["ttft_p50_s"].tolist() == [0.015, 0.030]


def test_the_frontier_marks_the_pareto_efficient_points(tmp_path):
    # output tokens/s = num_requests × 16 / 2 s: 8 → 64, 16 → 128, 32 → 256 tokens/s.
    a = serve_point(concurrency=2, num_requests=16, tpot_ms=5.0)   # 128 tok/s at 5 ms: efficient
    b = serve_point(concurrency=4, num_requests=8, tpot_ms=6.0)    # 64 tok/s at 6 ms: a beats it on both
    c = serve_point(concurrency=8, num_requests=32, tpot_ms=9.0)   # 256 tok/s at 9 ms: efficient
    f = frontier(load(write_run(tmp_path, [engine(), server_record(), a, b, c])).serve).set_index("point_id")
    assert f.loc[a.id, "output_tokens_per_s"] == 128 and f.loc[c.id, "output_tokens_per_s"] == 256
    assert f["pareto"].to_dict() == {a.id: True, b.id: False, c.id: True}


# --- (d) the served ceiling -----------------------------------------------------------------------------

P, O = 128, 64  # 191 KV positions at the longest: ceil(191 / 32) = 6 blocks per sequence


def test_predicted_served_ceiling_from_the_engine_record_without_metrics(tmp_path):
    srv = server_record(startup_log=StartupLog(max_num_seqs=64))
    res = load(write_run(tmp_path, [engine(blocks=41), srv, serve_point(concurrency=4, prompt_len=P, output_len=O)]))
    r = served_ceiling(res).iloc[0]
    assert r["predicted_ceiling"] == (41 - 1) // 6 == 6  # the null block out, 6 blocks per sequence
    assert r["limited_by"] == "kv_cache" and r["vllm_arithmetic"] == pytest.approx(41 / 6)
    assert r["blocks_source"] == "offline engine record" and r["max_num_seqs"] == 64
    assert r["max_num_seqs_source"] == "server log"
    assert not r["sampled"] and r["running_clean_max"] is None  # no /metrics: nothing measured, nothing invented


def test_the_servers_own_kv_pool_wins_when_it_differs_from_the_offline_engines(tmp_path):
    # The server logged 992 KV tokens = int(31 blocks / 32 blocks per 1,024-token request × 1,024): 31 blocks.
    srv = server_record(startup_log=StartupLog(log_kv_cache_tokens=992, max_num_seqs=64))
    res = load(write_run(tmp_path, [engine(blocks=41), srv, serve_point(concurrency=4, prompt_len=P, output_len=O)]))
    r = served_ceiling(res).iloc[0]
    assert r["num_blocks"] == 31 and r["blocks_source"] == "server log (KV cache tokens)"
    assert r["predicted_ceiling"] == (31 - 1) // 6 == 5
    assert "31 blocks" in r["note"] and "41" in r["note"]


@needs_server_telemetry
def test_measured_served_ceiling_from_running_and_waiting(tmp_path):
    levels = {2: (2, 0, 0), 4: (4, 0, 0), 8: (6, 2, 0), 16: (6, 10, 3)}  # c → running, waiting, preemptions
    recs = [engine(blocks=41), server_record(startup_log=StartupLog(max_num_seqs=64))]
    recs += [serve_point(concurrency=c, prompt_len=P, output_len=O,
                         server={"peak_requests_running": r, "peak_requests_waiting": w, "preemptions": p})
             for c, (r, w, p) in levels.items()]
    row = served_ceiling(load(write_run(tmp_path, recs))).iloc[0]
    assert row["running_clean_max"] == 4 and row["clean_level"] == "c4"
    assert row["queueing_from"] == "c8" and row["queueing_running"] == 6 and row["queueing_cause"] == "waiting"
    assert row["predicted_ceiling"] == 6 and row["clean_vs_predicted"] == 4 - 6


# --- (e) goodput ------------------------------------------------------------------------------------------

SLO = {"ttft_s": 0.05, "tpot_s": 0.006}
REQUESTS = ServeRequests(  # ttft, e2el, output tokens → TPOT = (e2el − ttft) / (output − 1)
    ttft_s=[0.02, 0.06, 0.03, 0.04, 0.05],
    e2el_s=[0.02 + 15 * 0.005,   # TPOT 5 ms, TTFT 20 ms: good
            0.06 + 15 * 0.005,   # TTFT 60 ms > 50 ms: not good
            0.03 + 15 * 0.007,   # TPOT 7 ms > 6 ms: not good
            0.04,                # one output token: TPOT counts as 0 (vLLM's rule): good
            0.05 + 15 * 0.005],  # TTFT exactly at the bound: good (vLLM: bound ≥ value)
    output_len=[16, 16, 16, 1, 16], input_len=[64] * 5, start_s=[0.0, 0.1, 0.2, 0.3, 0.4])


def test_good_requests_follow_vllms_rule():
    assert good_requests(REQUESTS.ttft_s, REQUESTS.e2el_s, REQUESTS.output_len, SLO) == 3
    assert good_requests(REQUESTS.ttft_s, REQUESTS.e2el_s, REQUESTS.output_len, {"e2el_s": 0.1}) == 2  # 95, 40 ms


def test_goodput_recomputed_from_the_requests_agrees_with_the_client(tmp_path):
    # 3 good requests in 2 s: 1.5 req/s of goodput; 5 completed in 2 s: 2.5 req/s; share 1.5 / 2.5 = 0.6.
    common = {"slo": SLO, "requests": REQUESTS, "completed": 5, "request_throughput": 2.5}
    ok = serve_point(concurrency=4, measurements=common | {"request_goodput": 1.5})
    off = serve_point(concurrency=8, measurements=common | {"request_goodput": 2.0})  # not what its requests say
    plain = serve_point(concurrency=2)  # no SLO: no goodput row
    g = goodput_table(load(write_run(tmp_path, [engine(), server_record(), ok, off, plain]))).set_index("point_id")
    assert list(g.index) == [ok.id, off.id] or sorted(g.index) == sorted([ok.id, off.id])
    assert g.loc[ok.id, "good_requests"] == 3 and g.loc[ok.id, "recomputed_goodput"] == 3 / 2.0
    assert g.loc[ok.id, "goodput_share"] == pytest.approx(1.5 / 2.5) and g.loc[ok.id, "agrees"]
    assert not g.loc[off.id, "agrees"]


# --- (f) prefix sharing -----------------------------------------------------------------------------------

def test_prefix_hit_rate_from_the_counters_without_metrics(tmp_path):
    shared = serve_point(concurrency=4, prompt_len=P, output_len=O, prefix_len=96,
                         measurements={"server_counters": {"prefix_cache_hits": 2400.0,
                                                           "prefix_cache_queries": 4000.0}})
    plain = serve_point(concurrency=4, prompt_len=P, output_len=O)
    t = prefix_sharing(load(write_run(tmp_path, [engine(blocks=41), server_record(), plain, shared])))
    assert t["prefix_len"].tolist() == [0, 96] and t["shared_blocks"].tolist() == [0, 96 // 32]
    assert t["hit_rate"].iloc[1] == 2400 / 4000
    assert "predicted_saving" not in t  # no running requests observed: no prediction


@needs_server_telemetry
def test_prefix_sharing_predicted_and_measured_kv_usage(tmp_path):
    # 4 running requests of ceil(191 / 32) = 6 blocks in a pool of 41 blocks (40 usable): 24 / 40 = 0.6 unshared;
    # a 96-token prefix is 3 full blocks held once: 24 − 3 × 3 = 15 blocks, 15 / 40 = 0.375 shared.
    plain = serve_point(concurrency=4, prompt_len=P, output_len=O,
                        server={"peak_requests_running": 4, "peak_kv_cache_usage": 0.55, "mean_kv_cache_usage": 0.3})
    shared = serve_point(concurrency=4, prompt_len=P, output_len=O, prefix_len=96,
                         server={"peak_requests_running": 4, "peak_kv_cache_usage": 0.35, "mean_kv_cache_usage": 0.2,
                                 "prefix_cache_hit_rate": 0.7})
    t = prefix_sharing(load(write_run(tmp_path, [engine(blocks=41), server_record(), plain, shared])))
    t = t.set_index("prefix_len")
    assert t.loc[0, "predicted_usage_unshared"] == pytest.approx(24 / 40)
    assert t.loc[96, "predicted_usage_shared"] == pytest.approx(15 / 40)
    assert t.loc[96, "predicted_saving"] == pytest.approx(24 / 40 - 15 / 40)
    assert t.loc[96, "measured_saving"] == pytest.approx(0.55 - 0.35) and t.loc[96, "hit_rate"] == 0.7
