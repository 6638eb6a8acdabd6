"""`kvprof plan --probe FILE`: the probed device's own memory, never the host's by accident."""

import json

import pytest
from typer.testing import CliRunner

from profiler.cli import app

runner = CliRunner()
GiB = 2**30

# tiny-llama-gqa/config.json: embeddings and untied lm_head 2 · 2048 · 256 = 1,048,576; per layer
# q 256·256 + k, v 2·256·64 + o 256·256 + gated MLP 3·256·512 + 2 norms·256 = 557,568, × 4 layers = 2,230,272;
# final norm 256 → 3,279,104 parameters × 2 B (bfloat16) = 6,558,208 B of weights, and the RoPE cache vLLM's model
# loading holds beside them: 8,192 positions × head_dim 32 × 2 B = 524,288 B.
TINY_WEIGHTS = 6_558_208 + 8_192 * 32 * 2


def probe_file(tmp_path, **fields) -> str:
    probe = {"probe_version": 2, "device": "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
             "device_type": "cuda", "copy": {"bandwidth_Bps": {"median": 1.5e12}},
             "matmul_bf16": {"flops_per_s": {"median": 4.0e14}}, "decode_attention": []}
    probe.update(fields)
    for k in [k for k, v in probe.items() if v is None]:
        del probe[k]
    path = tmp_path / "probe.json"
    path.write_text(json.dumps(probe))
    return str(path)


def plan(*args: str) -> dict:
    result = runner.invoke(app, ["plan", "--model", "tiny-llama-gqa", "--block-size", "32", "--max-model-len",
                                 "1024", "--reserve-bytes", "1GiB", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_gpu_outside_the_catalog_plans_with_the_probed_device_memory(tmp_path):
    path = probe_file(tmp_path, memory_total_bytes=96 * GiB, memory_source="cuda device total")
    p = plan("--probe", path, "--gpu-memory-utilization", "0.5")
    # budget = int(96 GiB × 0.5) − weights − reserve = 51,539,607,552 − 7,082,496 − 1,073,741,824
    assert p["kv_budget_bytes"] == 51_539_607_552 - TINY_WEIGHTS - 1_073_741_824 == 50_458_783_232
    assert p["bandwidth_Bps"] == 1.5e12 and p["peak_flops"] == 4.0e14  # the probe's medians
    assert p["gpu"] == "probe: NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"


def test_probe_memory_wins_over_the_catalog_for_a_known_gpu(tmp_path):
    # An H200 probed as a 1g.18gb MIG slice: the slice's memory, not the 141 GB of the spec sheet.
    path = probe_file(tmp_path, device="NVIDIA H200", memory_total_bytes=18 * GiB, memory_source="cuda device total")
    p = plan("--probe", path, "--gpu-memory-utilization", "0.9")
    # vLLM requests ceil(18 GiB × 0.9) = ceil(17,394,617,548.8) = 17,394,617,549
    assert p["kv_budget_bytes"] == 17_394_617_549 - TINY_WEIGHTS - 1_073_741_824


def test_cpu_probe_plans_with_the_host_ram_it_recorded(tmp_path):
    path = probe_file(tmp_path, device="CPU (x86_64)", device_type="cpu", memory_total_bytes=64 * GiB,
                      memory_source="host RAM")
    p = plan("--probe", path, "--entry", "offline")
    # vLLM's CPU defaults for the LLM class: no async scheduling, max_num_batched_tokens 4096, max_num_seqs 256.
    assert (p["async_scheduling"], p["max_num_batched_tokens"], p["max_num_seqs"]) == (False, 4096, 256)
    # ceil(64 GiB × 0.92) = ceil(63,221,918,597.12) = 63,221,918,598 (vLLM 0.32's default utilization)
    assert p["kv_budget_bytes"] == 63_221_918_598 - TINY_WEIGHTS - 1_073_741_824


@pytest.mark.parametrize("fields, message", [
    ({}, "memory_total_bytes is missing"),  # written before the probe recorded memory
    ({"memory_total_bytes": 0}, "memory_total_bytes is 0"),
    ({"memory_total_bytes": "lots"}, "memory_total_bytes is 'lots'"),
    ({"memory_total_bytes": GiB, "copy": {}}, "copy.bandwidth_Bps.median is missing"),
])
def test_probe_without_usable_facts_says_to_rerun_the_probe(tmp_path, fields, message):
    path = probe_file(tmp_path, **fields)
    result = runner.invoke(app, ["plan", "--model", "tiny-llama-gqa", "--probe", path])
    assert result.exit_code == 2, result.output
    assert message in result.output and "rerun `kvprof probe" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


def test_probe_file_that_is_not_json(tmp_path):
    path = tmp_path / "probe.json"
    path.write_text("{not json")
    result = runner.invoke(app, ["plan", "--model", "tiny-llama-gqa", "--probe", str(path)])
    assert result.exit_code == 2
    assert f"--probe {path}: not JSON" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_probed_catalog_part_keeps_its_architecture_and_links(tmp_path):
    # What a probe measures are ceilings; what it cannot (the architecture kernels are chosen by, the link
    # all-reduces cross) comes from the catalog part NVML names, and stays unknown for a part the catalog lacks.
    from analysis.catalog import from_probe

    def probed(device: str):
        return from_probe(json.loads(open(probe_file(tmp_path, device=device, memory_total_bytes=18 * GiB)).read()))

    h200 = probed("NVIDIA H200")
    assert (h200.generation, h200.interconnect, h200.interconnect_gbs) == ("hopper", "nvlink", 450)
    assert h200.bandwidth_tbs == 1.5  # the measured copy bandwidth, not the spec sheet's 4.8
    other = probed("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition")
    assert (other.generation, other.interconnect) == (None, None)
