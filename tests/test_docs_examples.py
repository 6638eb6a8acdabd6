"""Every `kvprof` example in the README, ARCHITECTURE.md and docs/ runs here, so the docs cannot drift.

An example that needs nothing this machine lacks runs for real and must exit 0. One that starts engines, needs
a GPU or a Ray cluster, or reads results and files a reader makes first (a sweep's results, a saved plan) is
parsed by the real command line instead: every option it names must exist and every value must convert, so a
renamed or removed option fails here. Which examples are parse-only is listed with the reason (NOT_RUN).
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from profiler.cli import app

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").glob("*.md"))]

# An example's words that mean it cannot run on this machine in a test, and why.
NOT_RUN = {
    "sweep": "starts engines (the demo sweep runs in tests/engines/test_sweep_e2e.py) unless --dry-run",
    "probe": "measures the device for minutes",
    "report": "reads a sweep's results (tests/analysis/report/test_report.py builds them)",
    "compare": "reads several sweeps' results (tests/analysis/measured/test_compare.py)",
    "check-plan": "reads a saved plan and a sweep (tests/analysis/measured/test_plan_check.py)",
    "path/to/model-dir": "a placeholder for the reader's own model folder",
    "--calibration": "reads a calibration a sweep wrote",
}


def examples() -> list[tuple[str, str]]:
    """(where, the command's words after `kvprof`) for every `kvprof` line of every ```bash block."""
    out = []
    for doc in DOCS:
        for block in re.findall(r"```bash\n(.*?)```", doc.read_text(encoding="utf-8"), re.S):
            for line in block.replace("\\\n", " ").splitlines():
                line = line.split(" #")[0].split(">")[0].strip()
                if line.startswith("kvprof "):
                    # `[--opt value]` marks an optional part: the example is checked with it
                    out.append((doc.name, re.sub(r"\[([^\]]*)\]", r"\1", line)[len("kvprof "):]))
    return out


EXAMPLES = examples()


def test_the_docs_have_examples_of_every_command():
    commands = {shlex.split(words)[0] for _, words in EXAMPLES}
    assert commands >= {"validate", "sweep", "report", "compare", "check-plan", "probe", "plan", "log"}


def _why_not_run(args: list[str]) -> str | None:
    if args[0] == "sweep" and "--dry-run" in args and not {"--devices", "--ray"} & set(args):
        return None
    return next((why for word, why in NOT_RUN.items() if word in args), None)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A folder holding what the examples name: the sweep specs, and a vLLM start-up log as vllm-serve.log."""
    d = tmp_path_factory.mktemp("docs")
    shutil.copytree(ROOT / "sweeps", d / "sweeps")
    shutil.copy(ROOT / "tests/fixtures/vllm_logs/v1_llama31_8b_l40s_kv_size.log", d / "vllm-serve.log")
    return d


@pytest.mark.parametrize("where, words", EXAMPLES, ids=[f"{w}: {c[:60]}" for w, c in EXAMPLES])
def test_every_example_runs_or_at_least_parses(where, words, workdir, monkeypatch):
    args = shlex.split(words)
    why = _why_not_run(args)
    if why is None:
        monkeypatch.chdir(workdir)
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 0, f"{where}: kvprof {words}\n{res.output[-3000:]}"
        return
    command = typer.main.get_command(app).commands.get(args[0])
    assert command is not None, f"{where}: no command {args[0]!r}"
    try:
        command.make_context(args[0], args[1:])  # parses and converts every option; runs nothing
    except Exception as exc:  # the command line's own usage errors (typer's click)
        pytest.fail(f"{where}: kvprof {words}: {exc} (not run: {why})")


def printed_outputs() -> list[tuple[str, str, str]]:
    """(where, the command's words, the output printed under it) for every ```bash block of one `kvprof` command
    followed directly by a plain ``` block: what the docs show that command printing."""
    out = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for command, printed in re.findall(r"```bash\n(kvprof [^\n`]*)\n```\s*\n```\n(.*?)```", text, re.S):
            out.append((doc.name, command[len("kvprof "):], printed))
    return out


PRINTED = printed_outputs()


def _normalized(text: str) -> str:
    return " ".join(text.split())


def test_the_printed_outputs_are_what_the_commands_print(workdir, monkeypatch):
    """Each line the docs show a command printing (numbers included) is in what the command prints now, at 80
    columns (a "..." line marks rows left out; a long line may wrap at another place)."""
    assert PRINTED, "the README shows the cost table a plan prints"
    monkeypatch.chdir(workdir)
    for where, words, printed in PRINTED:
        res = CliRunner().invoke(app, shlex.split(words), env={"COLUMNS": "80"})
        assert res.exit_code == 0, f"{where}: kvprof {words}\n{res.output[-3000:]}"
        output = _normalized(res.output)
        missing = [line.strip() for line in printed.splitlines()
                   if line.strip() and line.strip() != "..." and _normalized(line) not in output]
        assert missing == [], f"{where}: kvprof {words} no longer prints these lines the docs show"


def _layout_paths() -> set[str]:
    """The paths docs/layout.md's tree names: a line's first word, under the folders its indentation puts it in
    (two spaces a level)."""
    tree = (ROOT / "docs" / "layout.md").read_text(encoding="utf-8").split("```")[1]
    stack: list[str] = []
    named = set()
    for line in tree.splitlines():
        if not line.strip():
            continue
        depth = (len(line) - len(line.lstrip(" "))) // 2
        word = line.split()[0]
        stack = [*stack[:depth], word.rstrip("/")]
        named.add("/".join(stack))
    return named


def test_the_layout_names_every_module_in_its_folder():
    named = _layout_paths()
    modules = {str(f.relative_to(ROOT)) for pkg in ("analysis", "profiler") for f in (ROOT / pkg).rglob("*.py")
               if f.name != "__main__.py" and "__pycache__" not in f.parts
               and not (f.name == "__init__.py" and f.parent.name in ("analysis", "profiler"))
               # a catalog model's own files (a checkpoint's remote-code config class) are data, not kvprof modules
               and not f.is_relative_to(ROOT / "analysis" / "catalog" / "models")}
    # a package's __init__ is named by its folder (catalog/'s loader, cli/'s app are listed too where they hold code)
    missing = sorted(m for m in modules if m not in named
                     and not (m.endswith("/__init__.py") and m.removesuffix("/__init__.py") in named))
    assert not missing, f"docs/layout.md does not list {missing}"
    stale = sorted(p for p in named if p.endswith(".py") and not (ROOT / p).exists())
    assert not stale, f"docs/layout.md lists modules that do not exist: {stale}"


def test_where_a_change_goes_names_files_that_exist():
    """ARCHITECTURE.md's "Where a change goes" table sends a newcomer to files: each one it names is there."""
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    section = text.split("## 4. Where a change goes", 1)[1].split("\n## ", 1)[0]
    paths = set(re.findall(r"`((?:analysis|profiler|tests|sweeps|benchmarks|docs)/[\w/.-]+\.(?:py|yaml|md|txt))`",
                           section))
    assert len(paths) > 30  # the table is where this reads it from
    assert sorted(p for p in paths if not (ROOT / p).exists()) == []


def test_the_sweep_page_names_every_engine_axis():
    # An engine axis is one marked EngineSettings field; the sweep page's list of axes is where a user finds it.
    from profiler.spec import EngineAxes

    text = (ROOT / "docs" / "sweep.md").read_text(encoding="utf-8")
    assert [n for n in EngineAxes.model_fields if f"`{n}`" not in text] == []
