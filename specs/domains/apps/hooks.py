"""Hooks of the apps domain: seed each environment's databases, check their state after the episode.

``apps.seed_db`` (prepare) writes fresh databases into the environment's working directory from the
SQL shipped in ``data/`` (schema and seed rows), run by the environment's own ``/usr/bin/python3``
(stdlib ``sqlite3``) so it works on every backend::

    {"prepare_func": "apps.seed_db", "prepare_args": {"databases": {"shop.db": "shop", "bank.db": "bank"}}}

An existing file is replaced, so a prepare after a reset (which wipes the workdir anyway) always
starts from the seed.

``apps.sql_state`` (evaluator) runs one read query against a database in the environment after the
episode and compares the rows (as JSON lists) with the task's ``value``::

    {"func": "raw", "op": "apps.sql_state", "value": [["paid", 4347]],
     "op_args": {"db": "shop.db", "query": "SELECT status, paid_cents FROM orders WHERE id = 1006"}}

It checks the STATE the task asks for, not the reply. A mismatch fails with the database, the query,
the expected and the actual rows; a query that cannot run (missing database, SQL error) is an
``EvaluatorError``, never a silent 0.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rewards.ops import EvalOutcome
from specs.env import EnvHandle
from specs.errors import EvaluatorError
from specs.registry import evaluator, prepare
from specs.task import TaskSpec
from specs.trajectory import Trajectory

DATA = Path(__file__).resolve().parent / "data"
PYTHON = "/usr/bin/python3"

_SEED = """
import json, os, sqlite3, sys
for path, sql in json.load(sys.stdin).items():
    for suffix in ("", "-journal", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    conn = sqlite3.connect(path)
    conn.executescript(sql)
    conn.close()
"""

_QUERY = """
import json, os, sqlite3, sys
path, query = sys.argv[1], sys.argv[2]
if not os.path.exists(path):
    sys.exit(f"database {path} does not exist")
conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
print(json.dumps([list(row) for row in conn.execute(query).fetchall()]))
"""


def seed_sql(name: str) -> str:
    """The schema and seed rows of one application's database (``data/<name>.sql``)."""
    path = DATA / f"{name}.sql"
    if not path.is_file():
        raise FileNotFoundError(f"apps.seed_db: no seed {name!r} (expected {path})")
    return path.read_text(encoding="utf-8")


@prepare("apps.seed_db")
async def seed_db(env: EnvHandle, task: TaskSpec, *, databases: dict[str, str]) -> None:
    """Write each database ``path -> seed name`` fresh from its seed SQL."""
    await write_databases(
        env, task, "apps.seed_db", {path: seed_sql(name) for path, name in databases.items()}
    )


async def write_databases(env: EnvHandle, task: TaskSpec, hook: str, databases: dict[str, str]) -> None:
    """Write each SQLite file ``path -> SQL`` fresh in the environment (any other domain's seed too)."""
    result = await env.run([PYTHON, "-c", _SEED], stdin=json.dumps(databases).encode())
    if result.returncode != 0:
        raise OSError(
            f"{hook} {sorted(databases)} in env {env.info.env_id} for task {task.instance_id}: "
            f"{result.stderr.strip()[-2000:]}"
        )


async def query_rows(env: EnvHandle, db: str, query: str) -> list[list[Any]]:
    """The rows of a read ``query`` on ``db`` inside the environment, as JSON lists."""
    result = await env.run([PYTHON, "-c", _QUERY, db, query])
    if result.returncode != 0:
        raise EvaluatorError(f"apps.sql_state: {db}: {query!r} failed: {result.stderr.strip()[-2000:]}")
    rows: list[list[Any]] = json.loads(result.stdout)
    return rows


@evaluator("apps.sql_state")
async def sql_state(
    env: EnvHandle, task: TaskSpec, trajectory: Trajectory, value: Any, *, db: str, query: str
) -> EvalOutcome:
    """Pass when ``query`` on ``db`` returns exactly the rows ``value`` (a list of rows)."""
    if not isinstance(value, list):
        raise EvaluatorError(
            f"task {task.instance_id}: apps.sql_state needs a list of rows as value, got {value!r}"
        )
    got = await query_rows(env, db, query)
    expected = json.loads(json.dumps(value))
    if got == expected:
        return EvalOutcome(passed=True, reason=f"{db}: state as expected")
    return EvalOutcome(passed=False, reason=f"{db}: {query} -> expected {expected}, got {got}")
