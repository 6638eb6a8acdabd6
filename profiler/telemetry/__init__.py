"""Telemetry: the sampler thread in the sweep's parent (sampler) and its sources: NVML per device (nvml_source), the
host and the engine's process tree (cpu_source), the served engine's /metrics (prometheus_source, with vLLM's
metric names mapped to neutral ones in vllm_metrics)."""
