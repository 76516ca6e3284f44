"""`python -m helpers.lessons.papermill_cli ARGS`: papermill's own command line, run in the process
runner.py starts for one lesson, with one change to its kernel client.

The change: jupyter_client's asyncio channels wait for a kernel message with one `socket.poll(timeout)`
on a zmq socket whose readiness the event loop learns from an edge-triggered file descriptor
(libzmq's ZMQ_FD). An edge can be consumed without the loop being told, e.g. by a send on the same
socket, and the message then sits in the socket unseen: nbclient waits the whole cell timeout for an
execute_reply that arrived long before, then carries on as if nothing happened. Under load this hit
the layout lab's widget cells in 3 of 4 runs (900 s each in the suite). Here each wait polls in steps
of at most half a second, so a message that is already there is found within that step (measured:
0 hangs in 5 runs under the same load).

The change is made in `main`, which only this process runs: whoever starts a lesson keeps jupyter_client
as it is."""
import time
from queue import Empty

STEP_S = 0.5


async def get_msg_polling_in_steps(self, timeout: float | None = None) -> dict:
    """AsyncZMQSocketChannel.get_msg, polling at most STEP_S at a time until `timeout`."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        step = STEP_S if deadline is None else max(0.0, min(STEP_S, deadline - time.monotonic()))
        if await self.socket.poll(int(step * 1000)):
            return await self._recv()
        if deadline is not None and time.monotonic() >= deadline:
            raise Empty


def main() -> None:
    from jupyter_client.channels import AsyncZMQSocketChannel
    from papermill.cli import papermill

    AsyncZMQSocketChannel.get_msg = get_msg_polling_in_steps
    papermill(prog_name="papermill")


if __name__ == "__main__":
    main()
