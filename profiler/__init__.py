"""kvprof profiler: drives real vLLM engines and samples the device while they run."""
