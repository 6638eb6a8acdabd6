"""vLLM's start-up log → numbers. The parser lives in ``analysis.vllm.startup_log`` (the
results contract's ``StartupLog`` and ``kvprof log`` read it without vLLM); this module
keeps the profiler's import path."""

from analysis.vllm.startup_log import PATTERNS, parse_startup, records

__all__ = ["PATTERNS", "parse_startup", "records"]
