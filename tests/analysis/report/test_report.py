"""The analysis and the report on a SYNTHETIC GPU-shaped results directory with injected parameters."""

import json

import jsonschema
import pytest
from pdf_checks import page_ink, pdf_text, summary_cells
from synthetic_results import GiB, Injected, Truth, make_results
from typer.testing import CliRunner

from analysis.measured.pipeline import analyse
from analysis.report.run import build_report
from analysis.results.load import LoadError, load
from profiler.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    root = tmp_path_factory.mktemp("synthetic")
    inj = make_results(root)
    written = build_report(root)
    return root, inj, written


@pytest.mark.parametrize(("model", "published"), [
    ("llama-3.1-8b", 8_030_261_248),  # meta-llama/Llama-3.1-8B: the safetensors index's parameter total
    ("qwen2.5-7b", 7_615_616_512),  # Qwen/Qwen2.5-7B: "Number of Parameters: 7.61B", safetensors total
])
def test_the_synthetic_truth_counts_the_published_parameters(model, published):
    """The synthetic engines' weights and decode bytes come from this count, not from kvprof's."""
    from analysis.catalog import resolve_model

    _, where = resolve_model(model)
    assert Truth.from_config(json.loads((where / "config.json").read_text())).parameters == published


def test_fit_recovers_the_injected_bandwidth_and_overhead(synthetic):
    root, inj, _ = synthetic
    a = analyse(load(root))
    assert a.fit.effective_bandwidth_Bps == pytest.approx(inj.bandwidth_Bps, rel=0.02)
    assert a.fit.step_overhead_s == pytest.approx(inj.overhead_s, rel=0.02)
    assert a.fit.effective_flops is None  # every point is memory-bound on an H100: no FLOP term
    assert a.fit.r2 > 0.999 and a.fit.loo_median_abs_rel_error < inj.wobble
    assert a.fit.mbu_spec == pytest.approx(inj.bandwidth_Bps / 3.35e12, rel=0.02)
    cal = json.loads((root / "calibration.json").read_text())
    assert cal["effective_bandwidth_Bps"] == a.fit.effective_bandwidth_Bps
    assert cal["step_overhead_s"] == a.fit.step_overhead_s
    # calibration.json is part of the plan's contract: it follows the exported schema (analysis.planning.outputs)
    from analysis.planning.outputs import SCHEMA_FILE, definition

    jsonschema.validate(cal, definition("Calibration", json.loads(SCHEMA_FILE.read_text())))
    assert cal["fit"]["n"] == a.fit.n and len(cal["fit"]["loo_rel_errors"]) == a.fit.n


def test_claims_report_the_injected_divergences(synthetic):
    root, inj, _ = synthetic
    claims = analyse(load(root)).claims.set_index("claim")
    fp8 = claims.loc["fp8 KV halves KV bytes and roughly doubles the batch that fits"]
    assert fp8["verdict"] == "diverges"
    assert fp8["error"] == pytest.approx(inj.fp8_capacity_factor - 1, abs=0.005)  # −20 %
    flat = claims.loc["Throughput stops rising once the KV pool is full"]
    assert flat["verdict"] == "diverges" and flat["error"] == pytest.approx(inj.throughput_gain_past_ceiling)
    assert claims.loc["Block rounding wastes less than one block per sequence", "verdict"] == "holds"
    assert claims.loc["Decode TPOT grows linearly with context past the crossover", "verdict"] == "holds"
    assert claims.loc["Batching amortises the weight read but not the KV read", "verdict"] == "holds"


def test_capacity_and_budget_divergences(synthetic):
    root, inj, _ = synthetic
    cap = analyse(load(root)).capacity.set_index(["max_model_len", "kv_cache_dtype"])
    auto, fp8 = cap.loc[(8192, "auto")], cap.loc[(8192, "fp8")]
    # auto: exact up to the 0.01 GiB rounding of the logged budget.
    assert abs(auto["blocks_error"]) <= auto["blocks_tolerance"]
    assert fp8["num_blocks_vllm"] / fp8["num_blocks_predicted"] == pytest.approx(inj.fp8_capacity_factor, abs=1e-3)
    # The heuristic reserve misses exactly the injected extra (up to the log's rounding).
    missed = auto["predicted_kv_budget_bytes"] - auto["kv_budget_bytes"]
    assert missed == pytest.approx(inj.extra_reserve_bytes, abs=0.005 * GiB)
    assert auto["ceiling_measured_at_least"] == auto["ceiling_predicted"]


def test_pdf_has_banner_headline_sections_and_ink_on_every_page(synthetic, tmp_path):
    root, _, written = synthetic
    text = pdf_text(written["pdf"])
    assert "SYNTHETIC DATA" in text.splitlines()[2]  # first page, right under the title
    a = analyse(load(root))
    bw = f"{a.fit.effective_bandwidth_Bps / 1e9:,.1f} GB/s"
    assert f"effective bandwidth {bw}" in text
    for title in ("KV capacity: the allocator model vs vLLM", "Batch ceiling at a fixed length",
                  "Block rounding", "Decode fit", "The seeds' claims against the data",
                  "Largest divergences between theory and measurement", "Environment", "Memory timeline",
                  "Power timeline: board power per engine, by phase"):
        assert title in text, title
    ink = page_ink(written["pdf"], tmp_path)
    assert len(ink) >= 15 and min(ink) > 0.002, ink  # no blank page


def test_summary_tables_match_the_pdf(synthetic):
    _, _, written = synthetic
    text = " ".join(pdf_text(written["pdf"]).split())
    summary = written["summary"].read_text()
    for title in ("KV capacity", "Batch ceiling", "Decode fit", "Block rounding"):
        rows = summary_cells(summary, title)
        assert rows, title
        for row in rows:
            for cell in row:
                assert cell in text, (title, cell)


def test_results_parquet_has_theory_beside_measurement(synthetic):
    import pandas as pd

    root, _, written = synthetic
    df = pd.read_parquet(written["results"])
    dec = df[df["phase"] == "decode"]
    assert dec["roofline_spec_s"].notna().all() and dec["fitted_s"].notna().all()
    assert len(df) == len(list((root / "points").glob("*.json")))


def test_plan_calibration_changes_tpot_by_exactly_the_fitted_factor(synthetic):
    root, _, _ = synthetic
    cal = json.loads((root / "calibration.json").read_text())
    args = ["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--batch", "8", "--context", "4096", "--json"]
    raw = json.loads(runner.invoke(app, args).stdout)
    res = runner.invoke(app, [*args, "--calibration", str(root / "calibration.json")])
    assert res.exit_code == 0, res.output
    calibrated = json.loads(res.stdout)
    assert raw["roofline_decode_bound"] == "memory"
    factor = 3.35e12 / cal["effective_bandwidth_Bps"]  # spec bandwidth ÷ fitted bandwidth
    assert calibrated["calibrated_decode_step_s"] - cal["step_overhead_s"] == pytest.approx(
        raw["roofline_decode_step_s"] * factor, rel=1e-12)
    assert "kvprof fit of" in calibrated["calibration_source"]


def test_a_calibration_carries_its_measured_power_into_the_plan_but_not_to_another_gpu(synthetic):
    """Every synthetic decode point drew 500 W on its one GPU: the calibration carries 500 W at each batch, and the
    plan's energy per token is 500 W × 1 GPU × the calibrated step ÷ the batch."""
    root, inj, _ = synthetic
    cal = json.loads((root / "calibration.json").read_text())
    assert cal["power"]["power_w_by_batch"] == [[c, 500.0] for c in inj.concurrency]
    assert cal["power"]["idle_power_w"] == 90.0 and cal["power"]["counted"] == "1 GPU board(s), NVML"
    args = ["plan", "--model", "llama-3.1-8b", "--batch", "8", "--context", "4096", "--json",
            "--calibration", str(root / "calibration.json")]
    p = json.loads(runner.invoke(app, [*args, "--gpu", "h100-sxm"]).stdout)
    assert p["calibrated_decode_power_w"] == 500.0
    assert p["calibrated_j_per_output_token"] == pytest.approx(500.0 * p["calibrated_decode_step_s"] / 8)
    assert "measured at batch 1, 4, 16, 64" in p["calibrated_power_source"]
    other = runner.invoke(app, [*args, "--gpu", "h200", "--transfer-calibration"])
    assert other.exit_code == 0, other.output
    q = json.loads(other.stdout)
    assert "calibrated_decode_power_w" not in q and "measured power not carried" in q["calibration_source"]


def test_not_a_results_directory_or_wrong_schema_is_a_clean_error(tmp_path):
    with pytest.raises(LoadError, match=r"no manifest\.json"):
        load(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"schema_version": 99}))
    with pytest.raises(LoadError, match="schema version 99; this kvprof reads versions 1, 2"):
        load(tmp_path)
    res = runner.invoke(app, ["report", str(tmp_path)])
    assert res.exit_code == 2 and "schema version 99" in res.output


def test_smaller_injection_is_recovered_too(tmp_path):
    inj = make_results(tmp_path, Injected(bandwidth_Bps=1.2e12, overhead_s=0.011, max_model_lens=(8192,),
                                          kv_dtypes=("auto",), telemetry_samples_per_engine=50))
    f = analyse(load(tmp_path)).fit
    assert f.effective_bandwidth_Bps == pytest.approx(inj.bandwidth_Bps, rel=0.02)
    assert f.step_overhead_s == pytest.approx(inj.overhead_s, rel=0.02)


def test_flat_step_times_give_no_bandwidth_and_say_why():
    from analysis.measured.decode_fit import fit_decode

    f = fit_decode([1e6, 2e6, 3e6, 4e6], [0.0031, 0.0030, 0.0031, 0.0030])
    assert f.effective_bandwidth_Bps is None and f.step_overhead_s == pytest.approx(0.00305, rel=0.02)
    assert "not identifiable" in f.note


def test_poor_fit_is_flagged():
    from analysis.measured.decode_fit import fit_decode

    f = fit_decode([1e6, 2e6, 3e6, 4e6, 5e6], [0.0031, 0.0050, 0.0029, 0.0052, 0.0030])
    assert f.r2 < 0.5 and "poor fit" in f.note


def test_one_registered_page_reaches_the_pdf_and_the_summary_in_registry_order(tmp_path, monkeypatch):
    from analysis.report import run as report
    from analysis.report.pdf import text_page

    make_results(tmp_path, Injected(max_model_lens=(8192,), kv_dtypes=("auto",), telemetry_samples_per_engine=50))
    names = [p.name for p in report.PAGES]
    assert len(set(names)) == len(names)
    before = build_report(tmp_path, tmp_path / "before.pdf")
    pages_before = pdf_text(before["pdf"]).count("\f")
    # Table pages appear in the PDF and in summary.md in the registry's order.
    a = analyse(load(tmp_path))
    titles = [a.tables[n].title for n in names if n in a.tables and n != "failed"]
    text, summary = pdf_text(before["pdf"]), before["summary"].read_text()
    assert [text.index(t) for t in titles] == sorted(text.index(t) for t in titles)
    assert [summary.index(f"### {t}") for t in titles] == sorted(summary.index(f"### {t}") for t in titles)

    extra = report.ReportPage("extra", lambda pdf, a: text_page(pdf, "An extra page", [("Extra", ["one entry"])]),
                              lambda a: ["## An extra page\n"])
    at = names.index("claims")
    monkeypatch.setattr(report, "PAGES", [*report.PAGES[:at], extra, *report.PAGES[at:]])
    written = build_report(tmp_path)
    text, summary = pdf_text(written["pdf"]), written["summary"].read_text()
    assert text.count("\f") == pages_before + 1
    assert text.index("Crossover: context") < text.index("An extra page") < text.index(a.tables["claims"].title)
    assert summary.index("### Crossover") < summary.index("## An extra page") < summary.index("### The seeds' claims")


def test_a_run_measured_on_a_busy_machine_has_no_fit_and_says_why(tmp_path):
    """Every decode point measured while another process kept a core busy: none is fitted, so there is no
    decode fit and no calibration.json, and page one and summary.md say how many points were left out and why."""
    make_results(tmp_path, Injected(max_model_lens=(8192,), kv_dtypes=("auto",), telemetry_samples_per_engine=20))
    decode = [p for p in (tmp_path / "points").glob("*.json")
              if json.loads(p.read_text())["point"]["phase"] == "decode"]
    for p in decode:
        rec = json.loads(p.read_text())
        rec["measurements"]["other_cpu_cores"] = 1.0
        p.write_text(json.dumps(rec))
    written = build_report(tmp_path)
    line = (f"Decode fit: none — {len(decode)} of {len(decode)} decode points were noisy or contended (other "
            "processes kept 1.0 CPU cores busy)")
    assert line in written["summary"].read_text()
    assert line in " ".join(pdf_text(written["pdf"]).split())
    assert "calibration" not in written and not (tmp_path / "calibration.json").exists()


def test_energy_per_token_is_each_points_energy_over_the_tokens_in_its_window(synthetic):
    """Each synthetic decode point's GPU used 500 J over its 1 s window (Injected.point_power_w), which held one
    warm-up and three measured batches of c requests × 128 output and p prompt tokens: J / output token =
    500 / (4 · c · 128), written out."""
    _, inj, written = synthetic
    assert inj.point_power_w == 500.0 and inj.output_len == 128
    summary = written["summary"].read_text()
    rows = summary_cells(summary, "Energy per token")
    assert rows
    c1 = [r for r in rows if r[2] == "1" and r[3] == "512"]
    c64 = [r for r in rows if r[2] == "64" and r[3] == "512"]
    assert c1 and c64
    assert "0.977" in c1[0]  # 500 / (4 · 1 · 128) = 0.9766 J per output token
    assert "0.0153" in c64[0]  # 500 / (4 · 64 · 128) = 0.01526
    assert "0.244" in c1[0]  # per prompt token: 500 / (4 · 1 · 512) = 0.2441
    assert "Energy: 0.0153–0.977 J per output token" in summary  # page one's line, from the same points
    text = " ".join(pdf_text(written["pdf"]).split())
    assert "Energy: 0.0153–0.977 J per output token" in text


def test_a_run_without_energy_says_why_on_page_one(tmp_path):
    make_results(tmp_path, Injected(point_power_w=None, max_model_lens=(8192,), kv_dtypes=("auto",)))
    a = analyse(load(tmp_path))
    assert a.energy_unavailable.startswith("the points were sampled but their records hold no energy")
    assert "energy" not in a.tables
