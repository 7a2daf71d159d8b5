"""Build the private virtual environments that third-party MCP servers run from.

A server is someone else's program with its own dependencies (``mcp-server-calculator`` needs
``mcp<2``, the framework uses ``mcp`` 2.x), so it gets its own venv under ``.cache/servers/<name>``
rather than sharing the trainer's. A ``server_envs.json`` lists what each server needs
(``{"server": ["pkg==1.2", ...]}``; keys starting with ``_`` are comments) and the matching
``servers.json`` runs ``.cache/servers/<server>/bin/python -m ...``. Pin exact versions (the
server's package and the ``mcp`` SDK it was checked with), so a rebuild installs the same thing.

Which files: every built-in domain's (``specs/domains/*/server_envs.json``) and the third-party
servers the test suite runs (``tests/servers/thirdparty/server_envs.json``), or the files (or
domain directories) given. A server name is one venv: two files that list it with different
requirements are an error. Idempotent: an environment whose recorded requirements match is left
alone.

A server written for a domain is a package like any other: a requirement ``./path/to/dir``
(relative to the project root) pip-installs that directory (a ``pyproject.toml`` project) into the
server's venv, non-editable, so the server runs from its venv alone on every backend (a sandbox
sees the venv, not the project tree). The recorded requirements carry a digest of the directory's
files, so a changed server is reinstalled at the next ``make servers``.

A server from the npm registry is listed as ``npm:<package>@<version>`` (every requirement of that
server must be one): its environment is an npm prefix, ``<root>/<server>/node_modules``, installed
with the machine's ``npm``, and its ``servers.json`` entry runs
``.cache/servers/<server>/node_modules/.bin/<command>`` (the bwrap backend binds the whole prefix).

    python -m launch.server_envs [--root .cache/servers] [FILE_OR_DOMAIN_DIR ...]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
DOMAINS = PROJECT / "specs" / "domains"
SPEC_GLOBS = ("specs/domains/*/server_envs.json", "tests/servers/thirdparty/server_envs.json")
"""The ``server_envs.json`` files ``make servers`` builds, relative to the project root."""


def default_spec_files() -> list[Path]:
    return [path for pattern in SPEC_GLOBS for path in sorted(PROJECT.glob(pattern))]


def spec_file(arg: str) -> Path:
    """A ``server_envs.json`` path, or a domain directory holding one."""
    path = Path(arg)
    return path / "server_envs.json" if path.is_dir() else path


def collect(files: Iterable[Path]) -> dict[str, list[str]]:
    """Server name -> requirements over every file; ``SystemExit`` naming both files on a clash."""
    wanted: dict[str, list[str]] = {}
    source: dict[str, Path] = {}
    for file in files:
        entries = json.loads(file.read_text())
        if not isinstance(entries, dict):
            raise SystemExit(f"{file}: expected an object mapping server names to requirement lists")
        for server, requirements in entries.items():
            if server.startswith("_"):
                continue
            if not isinstance(requirements, list) or not all(isinstance(r, str) for r in requirements):
                raise SystemExit(f"{file}: server {server!r}: expected a list of requirement strings")
            if server in wanted and sorted(wanted[server]) != sorted(requirements):
                raise SystemExit(
                    f"server env {server!r} is listed with different requirements in {source[server]} "
                    f"({wanted[server]}) and {file} ({requirements}); one name is one venv: rename one"
                )
            wanted[server], source[server] = list(requirements), file
    return wanted


NPM = "npm:"


def npm_packages(requirements: list[str], server: str) -> list[str] | None:
    """The npm packages of a server whose requirements are all ``npm:``; ``None`` when none is;
    ``SystemExit`` when some are (one environment is a venv or an npm prefix, not both)."""
    npm = [r.removeprefix(NPM) for r in requirements if r.startswith(NPM)]
    if npm and len(npm) != len(requirements):
        raise SystemExit(
            f"server env {server!r}: mixes npm: and Python requirements {requirements}; split it in two"
        )
    unpinned = [p for p in npm if "@" not in p.lstrip("@")]
    if unpinned:
        raise SystemExit(
            f"server env {server!r}: pin each npm package to a version (<package>@<version>): {unpinned}"
        )
    return npm or None


def is_local(requirement: str) -> bool:
    """A requirement naming a directory of the project (``./specs/domains/apps/servers``)."""
    return requirement.startswith("./")


def tree_digest(directory: Path) -> str:
    """Digest of every file's path and bytes below ``directory`` (build outputs left out)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        rel = path.relative_to(directory).as_posix()
        if any(part in _BUILD_OUTPUTS or part.endswith(".egg-info") for part in rel.split("/")):
            continue
        digest.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


_BUILD_OUTPUTS = frozenset({"build", "dist", "__pycache__"})


def resolved(requirements: list[str], project: Path = PROJECT) -> tuple[list[str], list[str]]:
    """(what pip installs, what the stamp records): local directories made absolute, and each
    recorded with the digest of its files; ``SystemExit`` naming a local requirement that is not a
    project directory."""
    install, record = [], []
    for requirement in requirements:
        if not is_local(requirement):
            install.append(requirement)
            record.append(requirement)
            continue
        directory = (project / requirement).resolve()
        if not (directory / "pyproject.toml").is_file():
            raise SystemExit(
                f"server requirement {requirement!r}: expected a project directory with a pyproject.toml "
                f"(relative to {project}), found none at {directory}"
            )
        install.append(str(directory))
        record.append(f"{requirement}#{tree_digest(directory)}")
    return install, record


def _copied(directory: str, scratch: Path) -> str:
    target = scratch / Path(directory).name
    shutil.copytree(directory, target, ignore=shutil.ignore_patterns(*_BUILD_OUTPUTS, "*.egg-info"))
    return str(target)


def ensure_server_env(root: Path, server: str, requirements: list[str]) -> Path:
    """Create or refresh ``root/server`` with exactly ``requirements`` installed."""
    env = root / server
    stamp = env / ".requirements.json"
    install, record = resolved(requirements)
    wanted = json.dumps(sorted(record))
    npm = npm_packages(requirements, server)
    entry = env / ("node_modules" if npm is not None else "bin/python")
    if stamp.exists() and stamp.read_text() == wanted and entry.exists():
        return env
    print(f"server env {server}: installing {' '.join(requirements)}", flush=True)
    if npm is not None:
        install_npm(env, npm)
        stamp.write_text(wanted)
        return env
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(env)], check=True)
    with tempfile.TemporaryDirectory(prefix=f"mcprl-server-{server}-") as scratch:
        # a local project is built from a copy: pip's build/ and *.egg-info never land in the tree
        install = [_copied(r, Path(scratch)) if os.path.isdir(r) else r for r in install]
        subprocess.run([str(env / "bin" / "python"), "-m", "pip", "install", "-q", *install], check=True)
    stamp.write_text(wanted)
    return env


def install_npm(env: Path, packages: list[str]) -> None:
    """A fresh npm prefix at ``env`` holding exactly ``packages`` (and what they depend on)."""
    if shutil.which("npm") is None:
        raise SystemExit(f"server env {env.name}: needs npm (Debian: apt-get install nodejs npm)")
    shutil.rmtree(env, ignore_errors=True)
    env.mkdir(parents=True)
    (env / "package.json").write_text(json.dumps({"name": f"mcprl-server-{env.name}", "private": True}))
    quiet = ["--no-audit", "--no-fund", "--loglevel=error", "--save-exact"]
    subprocess.run(["npm", "install", "--prefix", str(env), *quiet, *packages], check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--root", default=".cache/servers", help="where server venvs live")
    parser.add_argument(
        "specs",
        nargs="*",
        metavar="FILE_OR_DOMAIN_DIR",
        help="server_envs.json files or domain directories (default: " + ", ".join(SPEC_GLOBS) + ")",
    )
    args = parser.parse_args(argv)
    missing = [a for a in args.specs if not Path(a).exists()]
    if missing:
        raise SystemExit(f"no such file or directory: {', '.join(missing)}")
    files = [spec_file(a) for a in args.specs] or default_spec_files()
    # a domain directory without server_envs.json has no server of its own: nothing to build
    for server, requirements in collect(f for f in files if f.is_file()).items():
        # the real path: a venv records its own path (shebangs, pyvenv.cfg), and a .cache reached
        # through a symlink (a git worktree sharing one) would record the link, which may go away
        ensure_server_env(Path(args.root).resolve(), server, requirements)
    return 0


if __name__ == "__main__":
    sys.exit(main())
