"""Hooks of the gui domain: seed each environment's inventory database; its state is checked by
``apps.sql_state`` (a read query in the environment, the rows compared; ``specs.domains.apps.hooks``).

``gui.seed_db`` (prepare) writes ``inventory.db`` fresh into the environment's working directory from
``data/inventory.sql`` with the environment's own ``/usr/bin/python3``, so it works on every backend::

    {"prepare_func": "gui.seed_db"}

The app's server (web and MCP) opens the file per request, so a reset environment's new seed is
what the next episode sees, through either way in.
"""

from __future__ import annotations

from pathlib import Path

from specs.domains.apps.hooks import write_databases
from specs.env import EnvHandle
from specs.registry import prepare
from specs.task import TaskSpec

SEED = Path(__file__).resolve().parent / "data" / "inventory.sql"
DB = "inventory.db"


def seed_sql() -> str:
    """The inventory's schema and seed rows."""
    return SEED.read_text(encoding="utf-8")


@prepare("gui.seed_db")
async def seed_db(env: EnvHandle, task: TaskSpec) -> None:
    """Write ``inventory.db`` fresh from the seed."""
    await write_databases(env, task, "gui.seed_db", {DB: seed_sql()})
