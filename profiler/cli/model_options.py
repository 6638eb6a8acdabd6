"""Typer options generated from a pydantic model's fields, so each option is declared once, on the field it sets
(its help, flag and parser: ``analysis.planning.plan_inputs.Option``), as aiperf and GuideLLM declare theirs.

``with_model_options(PlanInputs, option)`` on a command whose signature ends in ``**fields`` replaces that with one
keyword option per field that declares one: the field's type (text where the field has a parser), its default, its
flag and its help. The command receives them in ``fields``, keyed by field name; ``parsed`` reads the text ones.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from typing import Annotated, Any, Union, get_args, get_origin

import typer
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from analysis.planning.plan_inputs import Option, PlanError


def _cli_type(annotation: Any) -> type:
    """The type typer parses a field's option as: int, float, bool or str (a Literal's choices are read as text and
    checked by the model)."""
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) in (Union, types.UnionType):
        annotation = next(a for a in get_args(annotation) if a is not type(None))
        return _cli_type(annotation)
    if annotation in (bool, int, float):
        return annotation
    return str  # str, and a Literal whose choices the model checks


def generated_options(model: type[BaseModel], option_of: Callable[[str], Option | None],
                      panel: str | None = None, exclude: frozenset[str] = frozenset()) -> list[inspect.Parameter]:
    """One keyword parameter with its typer.Option for each field of ``model`` that declares an option (listed
    under ``panel`` in --help), but those in ``exclude``."""
    out = []
    for name, field in model.model_fields.items():
        o = option_of(name)
        if o is None or name in exclude:
            continue
        default = None if field.default is PydanticUndefined else field.default
        kind = str if o.parse else _cli_type(field.annotation)
        annotation = Annotated[kind if default is not None else kind | None,  # type: ignore[operator]
                               typer.Option(o.flag or "--" + name.replace("_", "-"), help=o.help,
                                            rich_help_panel=panel)]
        out.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation))
    return out


def with_model_options(model: type[BaseModel], option_of: Callable[[str], Option | None],
                       panel: str | None = None, exclude: frozenset[str] = frozenset()) -> Callable:
    """A decorator: the command's ``**fields`` become ``model``'s generated options (see the module docstring), but
    the fields in ``exclude`` (a command that does not take them)."""
    def decorate(func: Callable) -> Callable:
        sig = inspect.signature(func, eval_str=True)  # the annotations as objects: typer reads __signature__ as is
        declared = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        generated = generated_options(model, option_of, panel, exclude)
        clash = {p.name for p in declared} & {p.name for p in generated}
        assert not clash, f"options declared twice: {sorted(clash)}"
        func.__signature__ = sig.replace(parameters=[*declared, *generated])  # type: ignore[attr-defined]
        return func
    return decorate


def parsed(values: dict[str, Any], option_of: Callable[[str], Option | None],
           flag_of: Callable[[str], str]) -> dict[str, Any]:
    """The fields' values with those given as text read by their option's parser; a value it refuses is a
    PlanError naming the flag."""
    out = dict(values)
    for name, value in values.items():
        o = option_of(name)
        if o is None or o.parse is None or not isinstance(value, str):
            continue
        try:
            out[name] = o.parse(value)
        except ValueError as exc:
            flag = flag_of(name)
            raise PlanError(str(exc) if str(exc).startswith(flag) else f"{flag}: {exc}") from None
    return out
