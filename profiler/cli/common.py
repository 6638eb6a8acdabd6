"""What every kvprof command shares: exit codes, the consoles, the one answer to Ctrl-C, one-line errors and
warnings, and output paths checked before any work."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

EXIT_SOME_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_WRITE_FAILED = 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a process Ctrl-C ended


class Commands(TyperGroup):
    """The app's commands, with one answer to Ctrl-C for all of them: one line and exit 130, never a
    traceback. Every command writes its files atomically, so what it wrote before stays whole.

    A KeyboardInterrupt that lands in a finalizer or weakref callback is swallowed by Python ("Exception
    ignored in …" with a traceback; the command carried on and exited 0). Here it is noted instead, sent
    again to the main thread a moment later (from a timer thread: one sent from inside the hook would be
    raised, and swallowed, in the hook itself) to stop the command, and the exit is 130 in any case.
    """

    def invoke(self, ctx: Any) -> Any:
        import _thread

        previous, swallowed = sys.unraisablehook, []

        def hook(unraisable: Any) -> None:
            if not isinstance(unraisable.exc_value, KeyboardInterrupt):
                return previous(unraisable)
            if not swallowed:
                swallowed.append(threading.Timer(0.05, _thread.interrupt_main))
                swallowed[0].start()
            return None

        sys.unraisablehook = hook
        try:
            rv = super().invoke(ctx)
            if swallowed:
                raise KeyboardInterrupt
            return rv
        except KeyboardInterrupt:
            err.print("interrupted: no file was left half-written", highlight=False)
            raise typer.Exit(EXIT_INTERRUPTED) from None
        finally:
            sys.unraisablehook = previous
            if swallowed:
                swallowed[0].cancel()



console = Console()
err = Console(stderr=True, soft_wrap=True)


def fail(message: str) -> typer.Exit:
    """Print one clear error line and return the exit to raise."""
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    return typer.Exit(EXIT_BAD_INPUT)


def warn(message: str) -> None:
    """One warning line on stderr: something left out, the command goes on."""
    err.print(f"[bold yellow]warning:[/] {escape(message)}", highlight=False)


def output_path(path: Path, option: str, *, results_dirs: tuple[Path, ...] = (),
                inputs: tuple[Path | None, ...] = (), example: str = "report.pdf") -> Path:
    """``path`` as a file a command may write, or the one-line error (exit 2) saying why not
    (``profiler.output_paths.output_file``: a directory, a missing or unwritable parent, one of a results
    directory's records, one of the command's own input files)."""
    from profiler.output_paths import OutputPathError, output_file

    try:
        return output_file(path, option, results_dirs=results_dirs, inputs=inputs, example=example)
    except OutputPathError as exc:
        raise fail(str(exc)) from None



def one_line(exc: Exception) -> str:
    """pydantic errors are multi-line; keep what names the field and the problem."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        return "; ".join(
            f"{'.'.join(str(x) for x in e['loc']) or 'input'}: {e['msg']}" for e in exc.errors()
        )
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
