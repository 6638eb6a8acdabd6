"""Served latency as vLLM's scheduler makes it: a served workload (:mod:`.workload`), replayed step by step through
the pinned vLLM's V1 scheduler and block pool, priced by the step model (:mod:`.replay`), into the figures ``vllm
bench serve`` prints (:mod:`.outcome`), with what the replay was checked against (:mod:`.evidence`). The engine a
plan describes, and the plan's served section, are ``analysis.planning.served``'s: this layer sits below planning."""
