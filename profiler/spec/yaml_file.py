"""Reading a spec file, hardened: size, nesting, alias expansion and duplicate keys bounded on YAML's node graph
before anything is built, and every validation error placed at its line (load_spec, parse_spec).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from profiler.spec.grid import check_grid
from profiler.spec.lines import FAST_LOADER, node_lines, yaml_line
from profiler.spec.sweep_spec import (
    MAX_SPEC_VALUES,
    EngineAxes,
    SaturationAxes,
    ServeAxes,
    SpecError,
    SweepSpec,
    TelemetrySpec,
    Timeouts,
    WorkloadAxes,
)

# libyaml's parser where PyYAML was built with it: ~10× faster on a 1 MiB spec (its error messages are
# worded differently, so a document it refuses is parsed again by PyYAML's for the message).


MAX_SPEC_DEPTH = 64  # mappings and lists inside each other; a spec nests a few (engine_args' dicts)


def _allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    sections = {"engine": EngineAxes, "workload": WorkloadAxes, "saturation": SaturationAxes, "serve": ServeAxes,
                "telemetry": TelemetrySpec, "timeouts": Timeouts}
    model = sections.get(loc[0]) if len(loc) == 2 else SweepSpec if len(loc) == 1 else None
    return list(model.model_fields) if model else []


MAX_SPEC_BYTES = 1 << 20  # a spec is a page of YAML; a megabyte is not one




def _check_yaml_tree(root: yaml.Node, path: Path) -> None:
    """Refuse what the safe loader accepts but a spec must not be: duplicate keys (the later one silently
    replaces the earlier, dropping a section) and aliases that expand past ``MAX_SPEC_VALUES`` values."""
    sizes: dict[int, int] = {}

    def size(node: yaml.Node) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        sizes[id(node)] = 1  # a node that refers to itself counts once
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for k, _ in node.value:
                if isinstance(k, yaml.ScalarNode) and k.value != "<<":
                    if k.value in seen:
                        raise SpecError(f"{path}:{k.start_mark.line + 1}: duplicate key {k.value!r} (first at "
                                        f"line {seen[k.value]}); YAML would keep only the last")
                    seen[k.value] = k.start_mark.line + 1
            n = 1 + sum(size(k) + size(v) for k, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            n = 1 + sum(size(v) for v in node.value)
        else:
            n = 1
        sizes[id(node)] = n
        if n > MAX_SPEC_VALUES:
            raise SpecError(f"{path}:{node.start_mark.line + 1}: expands to more than {MAX_SPEC_VALUES:,} values "
                            "(an alias counts each time it is used); a sweep spec needs far fewer")
        return n

    try:
        size(root)
    except RecursionError:
        raise SpecError(f"{path}: nested too deeply to be a sweep spec") from None


def _check_depth(text: str, path: Path, loader_cls: type) -> None:
    """Refuse a document nested deeper than ``MAX_SPEC_DEPTH``, from the parser's events (no recursion):
    composing one recursively would exhaust Python's stack, or libyaml's C one."""
    depth = 0
    for event in yaml.parse(text, Loader=loader_cls):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_SPEC_DEPTH:
                raise SpecError(f"{path}:{event.start_mark.line + 1}: nested more than {MAX_SPEC_DEPTH} levels "
                                "deep; a sweep spec nests a few")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _read_yaml(text: str, path: Path, loader_cls: type) -> tuple[yaml.Node | None, Any]:
    """The composed document (for its lines) and its value, after `_check_yaml_tree`."""
    loader = loader_cls(text)
    try:
        root = loader.get_single_node()
        if root is not None:
            _check_yaml_tree(root, path)
        return root, loader.construct_document(root) if root is not None else None
    finally:
        loader.dispose()


def load_spec(path: str | Path) -> SweepSpec:
    """Read and validate a YAML spec (safe loader). Raises SpecError with every problem."""
    path = Path(path)
    try:
        if path.exists() and not path.is_file() and not path.is_dir():  # /dev/zero, a FIFO: never read
            raise SpecError(f"{path}: not a regular file (a device, FIFO or socket); give a YAML spec file")
        if path.is_file() and path.stat().st_size > MAX_SPEC_BYTES:
            raise SpecError(f"{path}: {path.stat().st_size:,} bytes; a sweep spec is at most "
                            f"{MAX_SPEC_BYTES:,} bytes of YAML")
        text = path.read_text(encoding="utf-8")
        try:
            _check_depth(text, path, FAST_LOADER)
            root, raw = _read_yaml(text, path, FAST_LOADER)
        except yaml.YAMLError:
            if FAST_LOADER is yaml.SafeLoader:
                raise
            _check_depth(text, path, yaml.SafeLoader)  # libyaml refuses 1,000 levels in its own words
            root, raw = _read_yaml(text, path, yaml.SafeLoader)  # PyYAML's own words for the problem
    except RecursionError:
        raise SpecError(f"{path}: nested too deeply to be a sweep spec") from None
    except OSError as exc:
        raise SpecError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); save the spec as UTF-8") from None
    except yaml.YAMLError as exc:  # one line: where, and what the parser says
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        what = " ".join(str(getattr(exc, "problem", None) or exc).split())
        raise SpecError(f"{path}{where}: not valid YAML: {what}") from None
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: a sweep spec is a YAML mapping (name:, model:, engine:, workload:)")
    lines = node_lines(root)
    spec = parse_spec(raw, source=str(path), lines=lines)
    spec._base_dir = path.parent.absolute()  # a relative model path means the same from any directory
    spec._lines = lines
    check_grid(spec, source=str(path), lines=lines)  # before anything is expanded
    return spec


def parse_spec(raw: dict[str, Any], source: str = "spec", lines: dict[tuple[Any, ...], int] | None = None) -> SweepSpec:
    """Validate a parsed spec; SpecError lists every problem as ``SOURCE:LINE: field: what (allowed)``."""
    import difflib

    from pydantic import ValidationError

    try:
        return SweepSpec.model_validate(raw)
    except ValidationError as exc:
        out = []
        for e in exc.errors():
            loc = tuple(e["loc"])
            field = ".".join(str(x) for x in loc)
            if e["type"] == "extra_forbidden":
                allowed = _allowed_keys(loc)
                close = difflib.get_close_matches(str(loc[-1]), allowed, n=1, cutoff=0.6)
                msg = "unknown key" + (f"; did you mean {close[0]!r}?" if close else "")
                if allowed:
                    msg += f" (allowed: {', '.join(allowed)})"
            else:
                msg = e["msg"].replace("Value error, ", "")
                if e["type"] not in ("value_error", "missing") and "input" in e:
                    msg += f", got {e['input']!r}"
            line = yaml_line(lines or {}, loc)
            out.append(f"{source}{f':{line}' if line else ''}: {field}: {msg}")
        raise SpecError("\n".join(out)) from None
