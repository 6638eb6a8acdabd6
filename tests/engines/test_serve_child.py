"""The serve child's failures, against a stand-in server (tests/fake_server.py): a port someone else holds, a
server that never answers /health, a load generator whose every request fails. Each is recorded with its cause,
every point gets its fate, and nothing is left running."""

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import TESTS

from analysis.results.schema import ServerRecord, load_point
from profiler import serve
from profiler.machine import free_port
from profiler.spec import ServeJob, expand, parse_spec
from profiler.store import ResultsDir
from profiler.tokenizer import tokenizer_dir

pytestmark = pytest.mark.vllm  # the child imports vLLM (its version, and the benchmark client)
FAKE = TESTS / "fake_server.py"
SPEC = {"name": "s", "model": "tiny-llama-gqa",
        "engine": {"max_model_len": 1024, "block_size": 32, "kv_cache_memory_bytes": "16MiB"},
        "phases": ["serve"], "serve": {"concurrency": [1, 2], "prompt_len": 16, "output_len": 4, "num_requests": 2}}


def job(tmp_path: Path, ready_timeout_s: float = 60) -> tuple[ServeJob, Path]:
    plan = expand(parse_spec(SPEC))
    (cfg,) = plan.engines
    store = ResultsDir(tmp_path / "out")
    store.prepare()
    tok = tokenizer_dir(store.root, cfg.model_sha256)
    j = ServeJob(results_dir=str(store.root), engine_id=cfg.id, engine=cfg, seed=0, port=free_port(),
                 tokenizer_dir=str(tok), server_kwargs=cfg.server_kwargs(str(tok)), ready_timeout_s=ready_timeout_s,
                 points=plan.points[cfg.id])
    path = store.serve_job_path(cfg.id)
    path.write_text(j.model_dump_json())
    return j, path


def run(monkeypatch, tmp_path, mode: str, ready_timeout_s: float = 60) -> tuple[int, ServeJob, ResultsDir]:
    j, path = job(tmp_path, ready_timeout_s)
    monkeypatch.setattr(serve, "SERVER_COMMAND", [sys.executable, str(FAKE), mode])
    started = []
    real_popen = subprocess.Popen

    def popen(*args, **kwargs):
        p = real_popen(*args, **kwargs)
        started.append(p)
        return p

    monkeypatch.setattr(subprocess, "Popen", popen)
    try:
        code = serve.run_job(j, path)
    finally:
        for p in started:  # in a sweep the parent kills the serve child's group; here the test kills the server
            if p.poll() is None:
                p.kill()
            p.wait()
    return code, j, ResultsDir(j.results_dir)


def test_a_port_someone_else_holds_fails_every_point_with_the_servers_words(monkeypatch, tmp_path):
    code, j, store = run(monkeypatch, tmp_path, "port-taken")
    assert code == serve.SERVER_FAILED
    rec = ServerRecord.load_file(store.server_path(j.engine_id))
    assert rec.status == "crash" and rec.ready_at is None
    assert rec.message == "the server exited with return code 1 before /health answered"
    assert "address already in use" in rec.log_tail
    assert rec.tokenizer is not None and rec.tokenizer.synthetic and rec.tokenizer.vocab_size == 2048
    for p in j.points:
        point = load_point(store.point_path(p.id))
        assert point.status == "crash" and "server not ready" in point.message
        assert "address already in use" in point.log_tail


def test_a_server_that_never_answers_health_times_out(monkeypatch, tmp_path):
    code, j, store = run(monkeypatch, tmp_path, "never-ready", ready_timeout_s=2)
    assert code == serve.SERVER_FAILED
    rec = ServerRecord.load_file(store.server_path(j.engine_id))
    assert rec.status == "timeout" and rec.message == "/health did not answer within 2 s"
    assert {load_point(store.point_path(p.id)).status for p in j.points} == {"timeout"}


def test_a_load_generator_error_fails_that_point_and_the_server_serves_the_next(monkeypatch, tmp_path):
    code, j, store = run(monkeypatch, tmp_path, "broken")
    assert code == 0  # the server stayed up: not a crash
    rec = ServerRecord.load_file(store.server_path(j.engine_id))
    assert rec.status == "ok" and rec.ready_at is not None
    for p in j.points:
        point = load_point(store.point_path(p.id))
        assert point.status == "error"
        assert point.message == "load generator: RuntimeError: all 2 requests failed; the first: Internal Server Error"
        assert point.traceback
