"""The plan takes every engine setting a sweep can sweep, by the same name, with a `kvprof plan` option for it."""

from __future__ import annotations

import typer.main

from analysis.planning.plan import ENGINE_SETTINGS_NOT_PLANNED, PlanInputs
from analysis.planning.plan_inputs import LIST_OPTIONS, option, option_flag
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
    flags = {name: option_flag(name) for name in planned}
    assert {n: f for n, f in flags.items() if f not in options} == {}


def test_every_plan_input_is_an_option_declared_once_on_its_field():
    """A new PlanInputs field with its ``Option`` is a `kvprof plan` option with that help, without touching the
    command (profiler/cli/plan.py generates them); --tp and --pp, which take lists, are the only ones declared there.
    No flag is declared twice."""
    plan = typer.main.get_command(app).commands["plan"]  # type: ignore[attr-defined]
    by_name = {p.name: p for p in plan.params}
    for name in PlanInputs.model_fields:
        o = option(name)
        if name in LIST_OPTIONS:
            assert o is None and LIST_OPTIONS[name] in by_name[{"--tp": "tp", "--pp": "pp"}[LIST_OPTIONS[name]]].opts
            continue
        assert o is not None, f"PlanInputs.{name} has no `kvprof plan` option: give it an Option"
        assert option_flag(name) in by_name[name].opts and by_name[name].help == o.help, name
    flags = [f for p in plan.params for f in [*p.opts, *p.secondary_opts]]
    assert len(flags) == len(set(flags)), sorted(f for f in flags if flags.count(f) > 1)
    # the default a field declares is the option's: one place (the LoRA rank's 16 was written twice before)
    assert by_name["max_lora_rank"].default == PlanInputs.model_fields["max_lora_rank"].default == 16
