"""torch.distributed for a learner that is a world of one (DeepSpeed needs a process group anyway).

The rendezvous variables are filled in when absent (a free port probed on every interface); the
store binds that port later, so another process starting beside us (a vLLM engine) may take it in
between: ``init_single_process_dist`` then probes another, unless the port was the user's choice.
"""

from __future__ import annotations

import os
import socket


def ensure_single_process_dist_env() -> None:
    """Fill in the torch.distributed rendezvous variables for a world of one, keeping any already set."""
    if "MASTER_PORT" not in os.environ:
        # Probe on every interface: the rendezvous store listens on all of them, and a port free on
        # loopback may be held on the node's address (a Ray cluster's components use such ports).
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    for key, value in (("MASTER_ADDR", "127.0.0.1"), ("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
        os.environ.setdefault(key, value)


def init_single_process_dist(backend: str, attempts: int = 5) -> None:
    """``deepspeed.init_distributed`` for a world of one. The port we probed is free when probed, not
    when the store binds it (a generator starting beside us binds ports too): on EADDRINUSE probe
    another, unless the port was the user's choice."""
    import deepspeed
    import torch

    chosen = "MASTER_PORT" not in os.environ
    for attempt in range(attempts):
        ensure_single_process_dist_env()
        try:
            deepspeed.init_distributed(dist_backend=backend)
            return
        except torch.distributed.DistNetworkError as e:
            if not chosen or "EADDRINUSE" not in str(e) or attempt == attempts - 1:
                raise
            del os.environ["MASTER_PORT"]
