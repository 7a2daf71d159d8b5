"""The watchdog's test of "is the owner alive" (pid plus a start time that no clock change moves),
and a watchdog's life apart from the process that spawns it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil

from actors.env_watchdog import process_alive, spawn, start_marker
from actors.provisioners.local import owner


def test_an_owner_is_marked_by_its_start_in_ticks_since_boot_not_by_the_wall_clock() -> None:
    marker = start_marker(os.getpid())
    assert marker.startswith("ticks:") and marker == start_marker(os.getpid())
    assert owner()["owner_started"] == marker  # what environment labels record


def test_a_live_owner_is_alive_and_one_with_another_start_or_gone_is_not() -> None:
    me = os.getpid()
    assert process_alive(me, start_marker(me)) and process_alive(me, None)
    assert not process_alive(me, "ticks:1")  # the pid, reused by another process
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    marker = start_marker(child.pid)
    child.wait()
    assert not process_alive(child.pid, marker)
    assert not process_alive("nope", None)


def test_labels_from_before_markers_still_compare_by_create_time() -> None:
    me = os.getpid()
    assert process_alive(me, psutil.Process(me).create_time())
    assert not process_alive(me, psutil.Process(me).create_time() - 3600)


def test_a_watchdog_is_no_child_of_its_spawner_and_stops_when_told(tmp_path: Path) -> None:
    """Ray kills an actor worker's children (and their process group) when the worker exits: the
    watchdog must be neither, or it dies with the owner it was to outlive."""
    watchdog = spawn("local", {"root": str(tmp_path / "envs")}, "test-detached")
    try:
        assert watchdog.running()
        process = psutil.Process(watchdog.pid)
        assert watchdog.pid not in {child.pid for child in psutil.Process().children(recursive=True)}
        assert os.getpgid(watchdog.pid) != os.getpgid(0) and os.getsid(watchdog.pid) != os.getsid(0)
        assert "--owner-pid" in process.cmdline() and str(os.getpid()) in process.cmdline()
    finally:
        watchdog.stop()
    assert not watchdog.running()
    watchdog.stop()  # stopping a stopped one is nothing
