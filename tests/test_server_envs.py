"""Server venvs: a server written for a domain is a local project, recorded with its files' digest."""

from __future__ import annotations

from pathlib import Path

import pytest

from launch.server_envs import resolved, tree_digest


def project(root: Path) -> Path:
    server = root / "specs" / "domains" / "d" / "servers"
    (server / "pkg").mkdir(parents=True)
    (server / "pyproject.toml").write_text('[project]\nname = "pkg"\nversion = "0"\n')
    (server / "pkg" / "server.py").write_text("print('v1')\n")
    return server


def test_a_local_requirement_installs_its_directory_and_records_its_digest(tmp_path: Path) -> None:
    server = project(tmp_path)
    install, record = resolved(["./specs/domains/d/servers", "mcp==2.3.0"], tmp_path)
    assert install == [str(server.resolve()), "mcp==2.3.0"]
    assert record == [f"./specs/domains/d/servers#{tree_digest(server)}", "mcp==2.3.0"]


def test_the_digest_changes_with_the_code_and_ignores_build_outputs(tmp_path: Path) -> None:
    server = project(tmp_path)
    before = tree_digest(server)
    (server / "build" / "lib").mkdir(parents=True)
    (server / "build" / "lib" / "x.py").write_text("stale")
    (server / "pkg.egg-info").mkdir()
    (server / "pkg.egg-info" / "PKG-INFO").write_text("x")
    assert tree_digest(server) == before
    (server / "pkg" / "server.py").write_text("print('v2')\n")
    assert tree_digest(server) != before


def test_a_local_requirement_that_is_no_project_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"'\./nowhere': expected a project directory with a pyproject.toml"):
        resolved(["./nowhere"], tmp_path)


def test_an_npm_server_is_all_npm_and_pinned() -> None:
    from launch.server_envs import npm_packages

    assert npm_packages(["npm:@playwright/mcp@0.0.83"], "browser") == ["@playwright/mcp@0.0.83"]
    assert npm_packages(["mcp==2.3.0"], "time") is None
    with pytest.raises(SystemExit, match="mixes npm: and Python requirements"):
        npm_packages(["npm:x@1", "mcp==2.3.0"], "s")
    with pytest.raises(SystemExit, match=r"pin each npm package .*\['@playwright/mcp'\]"):
        npm_packages(["npm:@playwright/mcp"], "s")
