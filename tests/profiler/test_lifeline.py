"""A child outlives neither the sweep nor the Ray worker that started it (profiler.lifeline): when its parent
is killed outright (SIGKILL: no handler runs), the child takes its whole process group down."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from helpers import ROOT

# The child: holds the lifeline, starts a grandchild in its own group (as vLLM starts workers), reports both
# pids, then waits forever.
CHILD = textwrap.dedent("""
    import os, subprocess, sys, time
    from profiler.lifeline import hold
    hold(0.05)
    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print(os.getpid(), grandchild.pid, flush=True)
    time.sleep(600)
""")

# The parent (the sweep, or a Ray worker): starts the child in a new session, as the runner does, passes its
# pids on, then waits to be killed.
PARENT = textwrap.dedent("""
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
    print(child.stdout.readline().strip(), flush=True)
    time.sleep(600)
""")


def _gone(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    try:
        text = stat.read_text()
    except OSError:
        return True
    return text[text.rindex(")") + 2] in "ZX"


def test_a_child_whose_parent_is_killed_takes_its_group_down():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    parent = subprocess.Popen([sys.executable, "-c", PARENT, CHILD], stdout=subprocess.PIPE, text=True, env=env)
    pids: list[int] = []
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]
        child, grandchild = pids
        assert not _gone(child) and not _gone(grandchild)  # alive while the parent is
        assert os.getpgid(grandchild) == child  # the grandchild is in the child's group
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 60  # bounds a broken lifeline; the check is the state, not the time
        while not (_gone(child) and _gone(grandchild)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(child) and _gone(grandchild)
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if parent.poll() is None:
            parent.kill()
