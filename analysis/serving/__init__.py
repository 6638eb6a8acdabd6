"""Served latency as vLLM's scheduler makes it: a served workload (:mod:`.workload`), replayed step by step through
the pinned vLLM's V1 scheduler and block pool, priced by the step model (:mod:`.replay`; the engine a plan describes,
:mod:`.engine`), into the figures ``vllm bench serve`` prints (:mod:`.outcome`)."""
