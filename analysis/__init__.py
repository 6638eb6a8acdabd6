"""kvprof analysis: the analytic KV-cache model, fits and reports.

Never imports vllm, torch or profiler: it runs from a results directory alone.
"""
