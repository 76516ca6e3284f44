"""Which node a rank runs on, as per-node data caches and reports name it: simulated nodes share one host
name, so the multi-node simulation names each node (KIT_NODE_NAME); on real nodes the host name is
the label."""
from __future__ import annotations

import os
import socket


def node_label() -> tuple[str | None, str]:
    """(KIT_NODE_NAME or None, the label reports show)."""
    name = os.environ.get("KIT_NODE_NAME")
    host = socket.gethostname()
    return name, f"{name} on {host}" if name else host
