"""Sweep specs: the spec file's models (sweep_spec), reading it hardened (yaml_file, lines), its expansion into a
plan of engine configurations and points within the grid's limits (grid), and the job files the parent hands
its children (jobs). What other modules use is imported from here.
"""

from profiler.spec.grid import (
    DROPPED_LISTED,
    GridLimits,
    Plan,
    check_grid,
    dropped_summary,
    expand,
    grid_limits,
    grid_size,
)
from profiler.spec.jobs import EngineConfig, EngineJob, Point, ServeJob
from profiler.spec.lines import yaml_line
from profiler.spec.sweep_spec import MAX_SPEC_VALUES, EngineAxes, ServeAxes, SpecError, SweepSpec
from profiler.spec.yaml_file import MAX_SPEC_BYTES, load_spec, parse_spec

__all__ = [
    "DROPPED_LISTED",
    "MAX_SPEC_BYTES",
    "MAX_SPEC_VALUES",
    "EngineAxes",
    "EngineConfig",
    "EngineJob",
    "GridLimits",
    "Plan",
    "Point",
    "ServeAxes",
    "ServeJob",
    "SpecError",
    "SweepSpec",
    "check_grid",
    "dropped_summary",
    "expand",
    "grid_limits",
    "grid_size",
    "load_spec",
    "parse_spec",
    "yaml_line",
]
