"""Calibration files say which GPU, model (name and config digest) and vLLM they were fitted on;
`kvprof plan --calibration` refuses another GPU's or model's unless --transfer-calibration, and then
labels the plan as transferred and from what; files without those fields stay usable and say what is
not known."""

import hashlib
import json
import shutil

import pytest
from typer.testing import CliRunner

from analysis.catalog import MODELS_DIR
from analysis.measured.decode_fit import DecodeFit, calibration_dict
from profiler.cli import app

runner = CliRunner()
GQA, MHA = MODELS_DIR / "tiny-llama-gqa", MODELS_DIR / "tiny-llama-mha"
H100 = "NVIDIA H100 80GB HBM3"  # an NVML name the catalog maps to h100-sxm


def digest(model_dir) -> str:
    """sha256 of {"config": config.json} as canonical JSON: a dummy-weight engine's model_sha256."""
    config = json.loads((model_dir / "config.json").read_text())
    return hashlib.sha256(json.dumps({"config": config}, sort_keys=True).encode()).hexdigest()


GQA_SHA, MHA_SHA = digest(GQA), digest(MHA)
TINY = ("--kv-cache-memory-bytes", "16MiB", "--block-size", "32", "--max-model-len", "1024", "--batch", "4",
        "--context", "512", "--gpu", "h100-sxm")


def write(tmp_path, **fields) -> str:
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({"effective_bandwidth_Bps": 1e12, "source": "test fit", **fields}))
    return str(path)


def plan(*args: str):
    return runner.invoke(app, ["plan", *args])


FITTED = {"device": H100, "model": "tiny-llama-gqa", "model_config_sha256": GQA_SHA, "vllm_version": "0.32.0"}


# --- what a calibration file records ----------------------------------------------------------------

def _fit() -> DecodeFit:
    return DecodeFit(note="", effective_bandwidth_Bps=1e12, step_overhead_s=0.001, effective_flops=None, r2=0.99,
                     n=4, loo_rel_errors=[0.01] * 4)


@pytest.mark.parametrize("kwargs, expected", [
    # dummy weights: the engine's model_sha256 is the config digest of what ran
    ({"model_sha256": MHA_SHA, "weights": "dummy", "model_dir": str(GQA)}, MHA_SHA),
    # real weights: their fingerprint also counts the weight files; the config is read where it is
    ({"model_sha256": "f" * 64, "weights": "real", "model_dir": str(GQA)}, GQA_SHA),
    # neither (a copied results directory whose model is not here, a placeholder sha): unknown
    ({"model_sha256": "synthetic", "weights": "dummy", "model_dir": "/nowhere/model"}, None),
], ids=["dummy-weights", "real-weights", "unknown"])
def test_calibration_records_device_model_digest_and_vllm(kwargs, expected):
    cal = calibration_dict(_fit(), device=H100, vllm_version="0.32.0", model="tiny-llama-gqa",
                           kv_cache_dtype="auto", reserve_bytes=None, source="fit", **kwargs)
    assert (cal["device"], cal["model"], cal["vllm_version"]) == (H100, "tiny-llama-gqa", "0.32.0")
    assert cal["model_config_sha256"] == expected


# --- the same GPU and model: applied, nothing to say -----------------------------------------------------

def test_a_calibration_of_this_model_on_this_gpu_is_applied_as_is(tmp_path):
    res = plan("--model", "tiny-llama-gqa", *TINY, "--calibration", write(tmp_path, **FITTED), "--json")
    assert res.exit_code == 0, res.output
    p = json.loads(res.stdout)
    assert p["calibration_provenance"] == {**FITTED, "device": H100, "transferred": False,
                                           "transferred_because": [], "fitted_on_model": None, "unknown": [],
                                           "warnings": []}
    assert p["calibration_source"] == "test fit"
    assert res.stderr == ""


def test_the_same_config_under_another_name_is_the_same_model(tmp_path):
    (tmp_path / "renamed").mkdir()
    shutil.copy(GQA / "config.json", tmp_path / "renamed" / "config.json")
    res = plan("--model", str(tmp_path / "renamed"), *TINY, "--calibration", write(tmp_path, **FITTED), "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["calibration_provenance"]["transferred"] is False


# --- another GPU or model: refused, or transferred and labelled ---------------------------------------

def test_another_gpu_is_refused_unless_transferred_then_scaled_by_the_spec_sheets(tmp_path):
    args = ("--model", "tiny-llama-gqa", *TINY[:-1], "h200")
    because = "fitted on NVIDIA H100 80GB HBM3, this plan is for NVIDIA H200 141GB"
    cal = write(tmp_path, **FITTED)
    res = plan(*args, "--calibration", cal, "--json")
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert res.stderr.strip() == (f"error: --calibration {cal}: {because} — its figures were measured there; pass "
                                  "--transfer-calibration to apply them anyway (its rates are then scaled by the two "
                                  "spec sheets and the plan is labelled as transferred)")
    res = plan(*args, "--calibration", cal, "--transfer-calibration", "--json")
    assert res.exit_code == 0, res.output
    p = json.loads(res.stdout)
    assert p["calibration_provenance"]["transferred"] is True
    assert p["calibration_provenance"]["transferred_because"] == [because]
    # H100 SXM 3.35 TB/s / 989 TFLOP/s → H200 4.8 TB/s / 989 TFLOP/s (gpus.yaml): bandwidth × 1.43, FLOP/s × 1
    assert p["calibration_source"] == (f"test fit [TRANSFERRED: {because}; rates scaled by the spec sheets: "
                                       f"bandwidth ×1.43, FLOP/s ×1; overhead and reserve as measured]")
    text = plan(*args, "--calibration", cal, "--transfer-calibration")
    assert text.exit_code == 0, text.output
    assert f"calibrated with test fit [TRANSFERRED: {because}" in " ".join(text.stdout.split())


def test_another_model_on_the_same_gpu_applies_without_a_flag_and_is_named(tmp_path):
    cal = write(tmp_path, **FITTED)
    res = plan("--model", "tiny-llama-mha", *TINY, "--calibration", cal, "--json")
    assert res.exit_code == 0, res.output
    p = json.loads(res.stdout)
    prov = p["calibration_provenance"]
    assert prov["transferred"] is False and prov["transferred_because"] == []
    assert prov["fitted_on_model"] == (
        f"fitted on model tiny-llama-gqa (config {GQA_SHA[:12]}), applied to tiny-llama-mha (config {MHA_SHA[:12]}): "
        "its bandwidth, FLOP rate and per-step overhead are the device's, measured with that model's kernels")
    assert p["calibration_source"] == (f"test fit (fitted on model tiny-llama-gqa (config {GQA_SHA[:12]}), applied "
                                       f"to tiny-llama-mha (config {MHA_SHA[:12]}))")


def test_a_folder_with_the_calibrated_name_but_another_config_is_another_model(tmp_path):
    (tmp_path / "tiny-llama-gqa").mkdir()
    shutil.copy(MHA / "config.json", tmp_path / "tiny-llama-gqa" / "config.json")
    res = plan("--model", str(tmp_path / "tiny-llama-gqa"), *TINY, "--calibration", write(tmp_path, **FITTED),
               "--json")
    assert res.exit_code == 0, res.output
    assert f"applied to tiny-llama-gqa (config {MHA_SHA[:12]})" in \
        json.loads(res.stdout)["calibration_provenance"]["fitted_on_model"]


def test_the_calibrations_own_device_needs_no_transfer(tmp_path):
    measured_on = {"name": H100, "kind": "cuda", "bandwidth_Bps": 3.0e12, "peak_flops": 9e14,
                   "memory_total_bytes": 80 * 2**30, "ceilings": "probe"}
    cal = write(tmp_path, **FITTED, measured_on=measured_on)
    res = plan("--model", "tiny-llama-gqa", *TINY[:-2], "--calibration", cal, "--json")  # no --gpu
    assert res.exit_code == 0, res.output
    p = json.loads(res.stdout)
    assert p["gpu"] == f"calibration: {H100}" and p["calibration_provenance"]["transferred"] is False


def test_procurement_rows_on_other_gpus_need_the_flag_and_say_transferred(tmp_path):
    cal = write(tmp_path, **FITTED)
    args = ("procure", "--model", "tiny-llama-gqa", "--gpu", "h100-sxm,h200", "--concurrency", "4", "--context", "512",
            "--calibration", cal, "--json")
    res = runner.invoke(app, args)
    assert res.exit_code == 2 and "this plan is for NVIDIA H200 141GB" in res.stderr
    res = runner.invoke(app, [*args, "--transfer-calibration"])
    assert res.exit_code == 0, res.output
    notes = {r["gpu"]: r["calibration_note"] for r in json.loads(res.stdout)}
    assert "TRANSFERRED" not in notes["h100-sxm"]
    assert "[TRANSFERRED: fitted on NVIDIA H100 80GB HBM3, this plan is for NVIDIA H200 141GB; rates scaled" \
        in notes["h200"]
    text = runner.invoke(app, [*args[:-1], "--transfer-calibration"], env={"COLUMNS": "250"})
    assert text.exit_code == 0 and "[TRANSFERRED: fitted on NVIDIA H100 80GB HBM3, this plan is for NVIDIA H200 " \
        "141GB; rates scaled" in " ".join(text.stdout.split())


# --- what is only a warning, and old files ----------------------------------------------------------------

def test_another_vllm_version_is_a_warning(tmp_path):
    cal = write(tmp_path, **{**FITTED, "vllm_version": "0.10.1"})
    res = plan("--model", "tiny-llama-gqa", *TINY, "--calibration", cal, "--json")
    assert res.exit_code == 0, res.output
    warning = ("the calibration was fitted with vLLM 0.10.1, this plan is for vLLM 0.32.0: its per-step overhead "
               "may differ")
    assert json.loads(res.stdout)["calibration_provenance"]["warnings"] == [warning]
    assert warning in " ".join(res.stderr.split())


def test_a_file_without_provenance_is_applied_and_says_what_is_unknown(tmp_path):
    res = plan("--model", "tiny-llama-gqa", *TINY, "--calibration", write(tmp_path), "--json")
    assert res.exit_code == 0, res.output
    unknown = ["the calibration does not say which device it was fitted on",
               "the calibration does not say which model it was fitted on",
               "the calibration does not say which vLLM it was fitted with"]
    p = json.loads(res.stdout)
    assert p["calibration_provenance"]["unknown"] == unknown and p["calibration_provenance"]["transferred"] is False
    assert [line.removeprefix("note: ") for line in res.stderr.strip().splitlines()] == unknown


def test_a_file_naming_its_model_without_a_digest_is_checked_by_name(tmp_path):
    old = {"device": H100, "model": "tiny-llama-gqa", "vllm_version": "0.32.0"}  # written before the digest
    res = plan("--model", "tiny-llama-gqa", *TINY, "--calibration", write(tmp_path, **old), "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["calibration_provenance"]["unknown"] == [
        "the calibration names its model (tiny-llama-gqa) but not its config digest: that it is the same config "
        "is assumed"]
    res = plan("--model", "tiny-llama-mha", *TINY, "--calibration", write(tmp_path, **old), "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["calibration_provenance"]["fitted_on_model"].startswith(
        "fitted on model tiny-llama-gqa, applied to tiny-llama-mha:")


def test_transfer_without_a_calibration_is_one_line():
    res = plan("--model", "tiny-llama-gqa", "--transfer-calibration")
    assert res.exit_code == 2 and res.stderr.strip().startswith("error: --transfer-calibration goes with --calibration")


def test_a_saved_plan_keeps_the_calibrations_provenance(tmp_path):
    saved = tmp_path / "plan.json"
    res = plan("--model", "tiny-llama-gqa", *TINY[:-1], "h200", "--calibration", write(tmp_path, **FITTED),
               "--transfer-calibration", "--save", str(saved))
    assert res.exit_code == 0, res.output
    assert json.loads(saved.read_text())["prediction"]["calibration_provenance"]["transferred"] is True
