"""The layers hold: analysis never imports the measurement side or the engines, and no two modules import each
other, directly or round a loop, at the top or inside a function.

Read from the source (every import statement, function-local ones included), so a cycle that only shows at
run time, when a late import fires, fails here too.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _modules() -> dict[str, Path]:
    out = {}
    for f in sorted([*ROOT.glob("analysis/**/*.py"), *ROOT.glob("profiler/**/*.py")]):
        parts = list(f.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = f
    return out


MODULES = _modules()


def _imports(path: Path) -> set[str]:
    """Every module named by an import statement anywhere in the file (``from a import b``: a, and a.b when
    that is a module)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return names


GRAPH = {m: {t for t in _imports(f) if t in MODULES and t != m} for m, f in MODULES.items()}


def test_analysis_never_imports_the_measurement_side_or_the_engines():
    for m, f in MODULES.items():
        if m.startswith("analysis"):
            bad = {t for t in _imports(f) if t.split(".")[0] in ("profiler", "vllm", "torch", "pynvml")}
            assert not bad, f"{m} imports {sorted(bad)}"


def test_no_import_cycles():
    # Depth-first search for a back edge; the path to it is the cycle.
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for t in sorted(GRAPH[m]):
            if state.get(t) == 1:
                loop = [*path[path.index(t):], t]
                raise AssertionError("import cycle: " + " -> ".join(loop))
            if t not in state:
                visit(t, [*path, t])
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m, [m])


def test_the_machine_facts_are_a_leaf():
    assert GRAPH["profiler.machine"] == set()
    # and the modules that once looped through each other's private names ask it instead
    for m in ("profiler.devices", "profiler.preflight", "profiler.runner.sweep", "profiler.ray_cluster"):
        assert "profiler.machine" in GRAPH[m]


# analysis's folders are layers, lowest first; a module imports only from its own layer or the ones below.
ANALYSIS_LAYERS = ("versions", "units", "table", "model", "catalog", "results", "vllm", "latency", "serving",
                   "planning", "measured", "report")


def _layer(module: str) -> int:
    return ANALYSIS_LAYERS.index(module.split(".")[1])


def test_analysis_layers_import_only_downwards():
    analysis = {m for m in MODULES if m.startswith("analysis.")}
    assert {m.split(".")[1] for m in analysis} == set(ANALYSIS_LAYERS), "a new folder in analysis/ needs its layer here"
    upward = sorted(f"{m} imports {t}" for m in analysis for t in GRAPH[m]
                    if t.startswith("analysis.") and _layer(t) > _layer(m))
    assert not upward, upward


def test_a_test_file_imports_helpers_never_another_test_file():
    tests = ROOT / "tests"
    bad = sorted(f"{f.relative_to(tests)} imports {name}" for f in tests.rglob("test_*.py")
                 for name in _imports(f) if name.split(".")[0].startswith("test_"))
    assert not bad, bad
