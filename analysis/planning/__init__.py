"""Predictions before anything runs: `kvprof plan`, the procurement table, a sweep's cost, the saved plan and its
check against a sweep.
"""
