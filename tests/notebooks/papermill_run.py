"""`python -m papermill`, with one fix: what tests/notebooks/test_notebooks.py runs each lesson with
(the same command-line arguments).

The fix: jupyter_client's asyncio channels wait for a kernel message with one `socket.poll(timeout)`
on a zmq socket whose readiness the event loop learns from an edge-triggered file descriptor
(libzmq's ZMQ_FD). An edge can be consumed without the loop being told, e.g. by a send on the same
socket, and the message then sits in the socket unseen: nbclient waits the whole cell timeout for an
execute_reply that arrived long before, then carries on as if nothing happened. Under load this hit
the layout lab's widget cells in 3 of 4 runs (900 s each in the suite). Here each wait polls in steps
of at most half a second, so a message that is already there is found within that step (measured:
0 hangs in 5 runs under the same load).

`run_lesson` starts this file on one lesson the way the notebook tests do."""
import os
import subprocess
import sys
import time
from pathlib import Path
from queue import Empty

import yaml
from jupyter_client.channels import AsyncZMQSocketChannel

STEP_S = 0.5
CELL_TIMEOUT_S = 900  # no cell of a CPU-sized lesson takes minutes; a hang fails instead of blocking CI


def run_lesson(notebook: Path, executed: Path, answers: dict | None) -> subprocess.CompletedProcess:
    """Run `notebook` top to bottom on CPU in its own papermill process (no client state shared
    between lessons), `answers` passed as parameters; its executed copy is written to `executed`."""
    executed.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [sys.executable, __file__, str(notebook), str(executed), "--cwd", str(notebook.parent), "-k", "python3",
         "-p", "device", "cpu", "--execution-timeout", str(CELL_TIMEOUT_S), "--no-progress-bar",
         *(["-y", yaml.safe_dump(answers)] if answers else [])],
        capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})


async def get_msg_polling_in_steps(self, timeout: float | None = None) -> dict:
    """AsyncZMQSocketChannel.get_msg, polling at most STEP_S at a time until `timeout`."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        step = STEP_S if deadline is None else max(0.0, min(STEP_S, deadline - time.monotonic()))
        if await self.socket.poll(int(step * 1000)):
            return await self._recv()
        if deadline is not None and time.monotonic() >= deadline:
            raise Empty


if __name__ == "__main__":
    AsyncZMQSocketChannel.get_msg = get_msg_polling_in_steps
    from papermill.cli import papermill

    papermill(prog_name="papermill")
