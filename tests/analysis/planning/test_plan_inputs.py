"""The plan takes every engine setting a sweep can sweep, by the same name, with a `kvprof plan` option for it."""

from __future__ import annotations

import typer.main

from analysis.planning.plan import ENGINE_SETTINGS_NOT_PLANNED, OPTION_FLAGS, PlanInputs
from analysis.results.schema import EngineSettings
from profiler.cli import app
from profiler.spec.sweep_spec import sweep_axes


def _plan_options() -> set[str]:
    plan = typer.main.get_command(app).commands["plan"]  # type: ignore[attr-defined]
    return {opt for p in plan.params for opt in p.opts}


def test_every_engine_axis_is_a_plan_input_with_its_option():
    axes = set(sweep_axes(EngineSettings))
    assert set(ENGINE_SETTINGS_NOT_PLANNED) <= axes, "a setting named as not planned that is no engine axis"
    planned = axes - set(ENGINE_SETTINGS_NOT_PLANNED)
    assert planned <= set(PlanInputs.model_fields), planned - set(PlanInputs.model_fields)
    options = _plan_options()
    flags = {name: OPTION_FLAGS.get(name, "--" + name.replace("_", "-")) for name in planned}
    assert {n: f for n, f in flags.items() if f not in options} == {}
