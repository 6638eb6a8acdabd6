#!/usr/bin/env bash
# The on-GPU checks of kvprof's telemetry, as one run on a machine with an NVIDIA GPU,
# torch (CUDA build) and nvidia-ml-py, without vLLM:
#   1. the `gpu`-marked tests (memory rises by a torch allocation; GPM DRAM % × spec
#      against a measured copy within 15 %; probe bandwidth physical),
#   2. benchmarks/gpu_sampler.py (the sampler through idle/alloc/copy/matmul phases),
#   3. `python -m profiler.probe` (the sweep's probe child, full size),
#   4. benchmarks/telemetry_overhead.py --calls (the sampler's CPU cost, and each NVML call's),
#   5. benchmarks/gpu_decode_kernels.py (a decode step's GEMMs, attention and graph floor beside the
#      latency model's terms for them),
#   6. benchmarks/gpu_moe_kernel.py (vLLM's fused-MoE Triton kernel; needs its source, copied here by
#      `python benchmarks/gpu_moe_kernel.py --vendor .device/moe` and carried along).
# Results go to $OUT (default /tmp/kvprof-gpu-check): logs, probe.json, telemetry.parquet,
# decode_kernels.json.
#
# Python packages the GPU box lacks (pydantic, for analysis.catalog) travel as wheels in
# .whl/ (`make gpu-wheels` here fetches them); they are installed to /tmp/site first.
# Exit status: the number of steps that failed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kvprof-gpu-check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
PY=${PYTHON:-python3}
if compgen -G ".whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
failed=0
step() {  # step NAME CMD...: run, log to $OUT/NAME.log, count a failure
  local name=$1; shift
  echo "=== $name: $*"
  "$@" 2>&1 | tee "$OUT/$name.log"
  local rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] || { echo "=== $name FAILED (exit $rc)"; failed=$((failed + 1)); }
}
nvidia-smi --query-gpu=name,uuid,pci.bus_id,driver_version,memory.total,clocks.max.sm,clocks.max.mem \
  --format=csv | tee "$OUT/nvidia-smi.csv"
"$PY" -c "import torch, pynvml, pydantic; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'pydantic', pydantic.VERSION)"
step pytest-gpu "$PY" -m pytest -m gpu -v -s -p no:cacheprovider tests/profiler/test_gpu_telemetry.py
step gpu-sampler "$PY" benchmarks/gpu_sampler.py --out "$OUT"
step probe "$PY" -m profiler.probe --out "$OUT/probe.json"
step telemetry-cost "$PY" benchmarks/telemetry_overhead.py --seconds 5 --skip-sweeps --calls
step decode-kernels "$PY" benchmarks/gpu_decode_kernels.py --out "$OUT"
if [ -f .device/moe/vllm_fused_moe_kernel.py ]; then
  step moe-kernel "$PY" benchmarks/gpu_moe_kernel.py --kernel .device/moe --out "$OUT"
else
  echo "=== moe-kernel skipped: no .device/moe (run benchmarks/gpu_moe_kernel.py --vendor .device/moe where vLLM is)"
fi
echo "=== $failed step(s) failed; results in $OUT"
exit "$failed"
