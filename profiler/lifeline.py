"""A child's lifeline to the process that started it: when that parent is gone (the sweep was killed with
SIGKILL, or the Ray worker that ran the child died), the child takes its own process group down (vLLM's
workers, the OpenAI server) instead of running on as an orphan that holds a GPU or a core."""

from __future__ import annotations

import os
import signal
import threading
import time

POLL_S = 0.5


def hold(poll_s: float = POLL_S) -> threading.Thread | None:
    """Watch the parent from a daemon thread; once it is gone, SIGKILL this process's group — only when this
    process leads its group (the runner starts children with their own session), else just this process.
    None when there is no parent to watch (started by init)."""
    parent = os.getppid()
    if parent <= 1:
        return None

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        if os.getpgrp() == os.getpid():
            os.killpg(os.getpgrp(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)

    thread = threading.Thread(target=watch, name="kvprof-lifeline", daemon=True)
    thread.start()
    return thread
