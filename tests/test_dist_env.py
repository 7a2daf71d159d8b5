"""The learner's world-of-one rendezvous: the OS picks the store's port, a user's port is kept."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

from actors.dist_env import rendezvous_store

REPO = Path(__file__).resolve().parent.parent
DIST_VARS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")


def _run(script: str, **env: str) -> dict[str, object]:
    """``script`` in a fresh interpreter (a process group is per process); its last line as JSON."""
    clean = {k: v for k, v in os.environ.items() if k not in DIST_VARS} | env
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        cwd=REPO,
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_two_rendezvous_stores_in_one_process_get_distinct_ports_that_both_work() -> None:
    first, second = rendezvous_store(), rendezvous_store()
    assert first.port != second.port
    first.set("k", "one")
    second.set("k", "two")
    assert (first.get("k"), second.get("k")) == (b"one", b"two")


def test_a_port_another_socket_listens_on_is_not_the_rendezvous_port() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("", 0))
        taken.listen()
        store = rendezvous_store()
        assert store.port != taken.getsockname()[1]
        store.set("alive", "1")
        assert store.get("alive") == b"1"


def test_two_learners_in_one_process_share_one_group_made_without_a_master_port() -> None:
    facts = _run(
        """
        import json, os, socket
        import torch, torch.distributed as dist
        from actors.dist_env import init_single_process_dist

        taken = socket.socket(); taken.bind(("", 0)); taken.listen()  # a neighbour's port
        init_single_process_dist("gloo")
        init_single_process_dist("gloo")  # the second learner of this process
        x = torch.ones(3)
        dist.all_reduce(x)
        print(json.dumps({"world": dist.get_world_size(), "sum": x.tolist(),
                          "master_port": os.environ.get("MASTER_PORT")}))
        """
    )
    assert facts == {"world": 1, "sum": [1.0, 1.0, 1.0], "master_port": None}


def test_a_master_port_the_user_set_is_where_the_group_meets() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # free now; the child binds it (the user's choice, as given)
    facts = _run(
        """
        import json, os, socket
        import torch.distributed as dist
        from actors.dist_env import init_single_process_dist

        init_single_process_dist("gloo")
        with socket.create_connection(("127.0.0.1", int(os.environ["MASTER_PORT"])), timeout=5):
            pass  # the store listens there
        print(json.dumps({"world": dist.get_world_size(), "addr": os.environ["MASTER_ADDR"]}))
        """,
        MASTER_PORT=str(port),
    )
    assert facts == {"world": 1, "addr": "127.0.0.1"}
