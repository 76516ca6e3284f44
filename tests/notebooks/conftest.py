"""Papermill runs notebooks through nbclient, which waits for each cell's reply with
`shell_channel.get_msg(timeout=None)`. With widgets on the page (notebook 08) that wait can miss its
wake-up and block forever while the kernel sits idle (seen here once under heavy load: cell running,
kernel idle, no process left; nbclient issue #312). Polling in one-second steps instead finds the
reply that has arrived; `CELL_TIMEOUT_S` in test_notebooks.py still fails a cell that truly hangs."""
import queue

import pytest
from jupyter_client.channels import AsyncZMQSocketChannel

_get_msg = AsyncZMQSocketChannel.get_msg


async def _get_msg_polling(self, timeout=None):
    if timeout is not None:
        return await _get_msg(self, timeout)
    while True:
        try:
            return await _get_msg(self, 1.0)
        except queue.Empty:
            continue


@pytest.fixture(autouse=True)
def _poll_kernel_replies(monkeypatch):
    monkeypatch.setattr(AsyncZMQSocketChannel, "get_msg", _get_msg_polling)
