"""torch.distributed for a learner that is a world of one (DeepSpeed needs a process group anyway).

``init_single_process_dist`` makes the process group itself, before DeepSpeed looks: the master's
``TCPStore`` listens on port 0, so the operating system picks a free port as it binds (no port is
probed and then bound later, so no other process can take it in between), and the group is made
from that store. DeepSpeed's ``init_distributed`` then finds torch.distributed initialized and uses
it. A ``MASTER_PORT`` the user set is theirs: then the group is made the usual way (``env://``) on
that port. A second call in a process that already has its group (a second learner) reuses it.
The group this module made is destroyed at exit.
"""

from __future__ import annotations

import atexit
import os
from datetime import timedelta
from typing import Any

LOOPBACK = "127.0.0.1"
STORE_TIMEOUT = timedelta(minutes=5)


def ensure_single_process_dist_env() -> None:
    """Fill in the rank variables of a world of one (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``), and
    ``MASTER_ADDR`` where the user chose a ``MASTER_PORT``; any already set are kept."""
    for key, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
        os.environ.setdefault(key, value)
    if "MASTER_PORT" in os.environ:
        os.environ.setdefault("MASTER_ADDR", LOOPBACK)


def rendezvous_store() -> Any:
    """A world-of-one master ``TCPStore`` on a port the operating system picks (its ``.port``)."""
    import torch.distributed as dist

    return dist.TCPStore(LOOPBACK, 0, world_size=1, is_master=True, timeout=STORE_TIMEOUT)


def init_single_process_dist(backend: str) -> None:
    """torch.distributed and ``deepspeed.init_distributed`` for a world of one on ``backend``
    (``gloo`` or ``nccl``); a no-op for the group where this process already has one."""
    import deepspeed
    import torch.distributed as dist

    ensure_single_process_dist_env()
    if not dist.is_initialized() and "MASTER_PORT" not in os.environ:
        dist.init_process_group(backend, store=rendezvous_store(), rank=0, world_size=1)
        # Tear the group (and its store's server thread) down before the interpreter does: a store
        # destroyed during interpreter shutdown can abort the process ("terminate called ...").
        atexit.register(_destroy_group)
    deepspeed.init_distributed(dist_backend=backend)


def _destroy_group() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
