"""One sweep per results directory: ResultsDir.lock is the kernel's lock, held for the sweep's life.

Every holder here is a separate process that reports "locked" on stdout once it holds the
lock and keeps it until its stdin closes, so the test acts only while the lock is provably held.
"""

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import ROOT

from profiler.store import LOCK_NAME, ResultsDir, StoreError

# A sweep's lock, taken as a sweep takes it.
SWEEP_HOLDER = textwrap.dedent("""
    import sys
    from profiler.store import ResultsDir
    d = ResultsDir(sys.argv[1])
    d.prepare()
    d.lock()
    print("locked", flush=True)
    sys.stdin.read()
""")

# The kernel lock held on an empty lock file: a sweep caught between taking the lock and writing
# its pid into the file (the old O_EXCL scheme judged such a file stale and deleted it).
HOLDER_BEFORE_ITS_PID_IS_WRITTEN = textwrap.dedent(f"""
    import fcntl, os, sys
    fd = os.open(os.path.join(sys.argv[1], {LOCK_NAME!r}), os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    print("locked", flush=True)
    sys.stdin.read()
""")


@contextlib.contextmanager
def holder(out: Path, code: str = SWEEP_HOLDER):
    proc = subprocess.Popen([sys.executable, "-c", code, str(out)], cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "locked\n", "the holder could not take the lock"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def refusal(out: Path) -> str:
    with pytest.raises(StoreError) as info:
        ResultsDir(out).lock()
    return str(info.value)


def named_holder(message: str) -> tuple[int, str]:
    m = re.search(r"is in use by a running sweep \(pid (\d+) on (\S+)\)", message)
    assert m, message
    return int(m[1]), m[2]


def test_a_held_directory_is_refused_naming_the_holders_pid_and_host(tmp_path):
    with holder(tmp_path) as h:
        assert named_holder(refusal(tmp_path)) == (h.pid, socket.gethostname())


def test_a_held_lock_whose_pid_is_not_written_yet_is_not_taken_as_stale(tmp_path):
    lock_file = tmp_path / LOCK_NAME
    with holder(tmp_path, HOLDER_BEFORE_ITS_PID_IS_WRITTEN) as h:
        inode = lock_file.stat().st_ino
        assert lock_file.read_bytes() == b""
        # Refused, with the holder found all the same, and the holder's file left alone.
        assert named_holder(refusal(tmp_path)) == (h.pid, socket.gethostname())
        assert lock_file.stat().st_ino == inode and lock_file.read_bytes() == b""
        assert named_holder(refusal(tmp_path))[0] == h.pid  # still held: a second try is refused too


def test_a_lock_left_by_a_killed_sweep_is_taken_over(tmp_path):
    with holder(tmp_path) as h:
        os.kill(h.pid, signal.SIGKILL)  # no unlock, no clean-up
        h.wait()
    assert str(h.pid) in (tmp_path / LOCK_NAME).read_text()  # the file is left behind, naming the dead sweep
    d = ResultsDir(tmp_path)
    d.lock()
    try:  # the directory is ours now: another taker (even in this process) is told so
        assert named_holder(refusal(tmp_path)) == (os.getpid(), socket.gethostname())
    finally:
        d.unlock()


def test_unlock_frees_the_directory_for_the_next_sweep(tmp_path):
    d = ResultsDir(tmp_path)
    d.lock()
    d.unlock()
    with holder(tmp_path) as h:
        assert named_holder(refusal(tmp_path))[0] == h.pid


def test_kvprof_sweep_on_a_held_directory_exits_2_before_starting_anything(tmp_path):
    out = tmp_path / "held"
    out.mkdir()
    with holder(out) as h:
        res = subprocess.run([sys.executable, "-m", "profiler.cli", "sweep", "sweeps/tiny-cpu.yaml", "--out", str(out)],
                             cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr[-3000:]
    assert named_holder(res.stderr) == (h.pid, socket.gethostname()) and "Traceback" not in res.stderr
    assert not list(out.glob("points/*")) and not (out / "manifest.json").exists()

