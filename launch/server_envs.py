"""Build the private virtual environments that third-party MCP servers run from.

A server is someone else's program with its own dependencies (``mcp-server-calculator`` needs
``mcp<2``, the framework uses ``mcp`` 2.x), so it gets its own venv under ``.cache/servers/<name>``
rather than sharing the trainer's. A domain lists what each server needs in
``specs/domains/<domain>/server_envs.json`` (``{"server": ["pkg==1.2", ...]}``) and its
``servers.json`` runs ``.cache/servers/<server>/bin/python -m ...``. Idempotent: an environment
whose recorded requirements match is left alone.

    python -m launch.server_envs [--root .cache/servers] [DOMAIN_DIR ...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

DOMAINS = Path(__file__).resolve().parent.parent / "specs" / "domains"


def ensure_server_env(root: Path, server: str, requirements: list[str]) -> Path:
    """Create or refresh ``root/server`` with exactly ``requirements`` installed."""
    env = root / server
    stamp = env / ".requirements.json"
    wanted = json.dumps(sorted(requirements))
    if stamp.exists() and stamp.read_text() == wanted:
        return env
    print(f"server env {server}: installing {' '.join(requirements)}", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(env)], check=True)
    subprocess.run([str(env / "bin" / "python"), "-m", "pip", "install", "-q", *requirements], check=True)
    stamp.write_text(wanted)
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--root", default=".cache/servers", help="where server venvs live")
    parser.add_argument("domains", nargs="*", help="domain directories (default: every built-in domain)")
    args = parser.parse_args(argv)
    dirs = [Path(d) for d in args.domains] or sorted(p for p in DOMAINS.iterdir() if p.is_dir())
    for domain in dirs:
        spec = domain / "server_envs.json"
        if spec.exists():
            for server, requirements in json.loads(spec.read_text()).items():
                ensure_server_env(Path(args.root), server, list(requirements))
    return 0


if __name__ == "__main__":
    sys.exit(main())
