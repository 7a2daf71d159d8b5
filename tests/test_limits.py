"""Environment limits (``actors.provisioners.limits``): what each cgroup version is told, how the
limit counters are read, and how a command is started inside the groups or under rlimits. The
real enforcement (a memory hog, a fork bomb) is in ``test_backends.py``."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest

from actors.provisioners.limits import CFS_PERIOD_US, Cgroups, Limits, find_cgroups, tally, unenforced, wrap

LIMITS = Limits(memory_mb=256, pids=64, cpus=0.5)
V1_FILES = {
    "memory": ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes"),
    "pids": ("pids.max",),
    "cpu": ("cpu.cfs_period_us", "cpu.cfs_quota_us"),
}
V2_FILES = ("memory.max", "memory.swap.max", "pids.max", "cpu.max")


def as_cgroupfs(group: Path, names: tuple[str, ...]) -> None:
    """The files the kernel would show in a new group (a plain directory stands in for cgroupfs)."""
    group.mkdir(parents=True)
    for name in names:
        (group / name).write_text("max\n")


def test_v1_groups_get_each_limit_in_their_own_hierarchy(tmp_path: Path) -> None:
    bases = {c: tmp_path / c / "mcprl-envs" for c in V1_FILES}
    for controller, names in V1_FILES.items():
        as_cgroupfs(bases[controller] / "e1", names)
    made = Cgroups(1, bases).create("e1", LIMITS)
    assert sorted(made) == sorted(str(b / "e1") for b in bases.values())
    read = {n: (bases[c] / "e1" / n).read_text() for c, names in V1_FILES.items() for n in names}
    assert read == {
        "memory.limit_in_bytes": str(256 * 1024 * 1024),
        "memory.memsw.limit_in_bytes": str(256 * 1024 * 1024),  # no swap beyond the memory limit
        "pids.max": "64",
        "cpu.cfs_period_us": str(CFS_PERIOD_US),
        "cpu.cfs_quota_us": str(CFS_PERIOD_US // 2),
    }


def test_v2_has_one_group_with_every_limit_and_no_swap(tmp_path: Path) -> None:
    base = tmp_path / "mcprl-envs"
    as_cgroupfs(base / "e1", V2_FILES)
    made = Cgroups(2, dict.fromkeys(V1_FILES, base)).create("e1", LIMITS)
    assert made == [str(base / "e1")]
    assert {n: (base / "e1" / n).read_text() for n in V2_FILES} == {
        "memory.max": str(256 * 1024 * 1024),
        "memory.swap.max": "0",
        "pids.max": "64",
        "cpu.max": f"{CFS_PERIOD_US // 2} {CFS_PERIOD_US}",
    }


def test_a_limit_left_unset_is_not_written(tmp_path: Path) -> None:
    base = tmp_path / "mcprl-envs"
    as_cgroupfs(base / "e1", V2_FILES)
    Cgroups(2, dict.fromkeys(V1_FILES, base)).create("e1", Limits(pids=10))
    assert (base / "e1" / "pids.max").read_text() == "10"
    assert (base / "e1" / "memory.max").read_text() == (base / "e1" / "cpu.max").read_text() == "max\n"


def test_limit_hits_are_read_from_either_versions_event_files() -> None:
    v1 = [("memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"), ("pids.events", "max 7\n")]
    v2 = [("memory.events", "low 0\nhigh 0\nmax 5\noom 1\noom_kill 1\n"), ("pids.events", "max 0\n")]
    assert tally(v1) == {"memory": 2, "pids": 7}
    assert tally(v2) == {"memory": 1, "pids": 0}  # memory.events' "max" is not the pids counter
    assert tally([]) == {"memory": 0, "pids": 0}


def test_a_command_enters_its_groups_before_it_runs() -> None:
    command = wrap(["bwrap", "--", "python"], ["/cg/memory/e1", "/cg/pids/e1"], LIMITS)
    assert command[:2] == ["/bin/sh", "-c"]
    assert command[3] == "/cg/memory/e1/cgroup.procs /cg/pids/e1/cgroup.procs"
    assert command[4:] == ["bwrap", "--", "python"]  # exec'd: the same pid, inside the groups


@pytest.mark.skipif(shutil.which("prlimit") is None, reason="util-linux's prlimit is not installed")
def test_without_groups_a_command_runs_under_rlimits_and_what_they_miss_is_named() -> None:
    command = wrap(["bwrap", "--", "python"], [], LIMITS)
    assert command[0] == shutil.which("prlimit") and command[-3:] == ["bwrap", "--", "python"]
    assert f"--as={256 * 1024 * 1024}" in command
    assert ("--nproc=64" in command) == (os.geteuid() != 0)  # root's count holds every root process
    missed = unenforced(LIMITS, has_groups=False)
    assert missed.cpus == 0.5 and missed.memory_mb is None
    assert not unenforced(LIMITS, has_groups=True)
    assert wrap(["true"], [], Limits()) == ["true"]


def test_limits_say_what_they_are() -> None:
    assert LIMITS.describe() == "memory 256 MB, 64 processes, 0.5 CPUs"
    assert Limits().describe() == "none" and not Limits()


def test_this_hosts_cgroups_are_found_where_this_process_may_write_them() -> None:
    found = find_cgroups()
    if found is None:
        pytest.skip("no writable cgroup here (bwrap environments use rlimits)")
    assert found.version in (1, 2) and set(found.bases) == {"memory", "pids", "cpu"}
    for base in found.bases.values():
        assert base.name == "mcprl-envs" and os.access(base, os.W_OK)


def test_v2_groups_go_beside_this_process_where_the_parent_hands_the_controllers_down(tmp_path: Path) -> None:
    from actors.provisioners.limits import _find_v2

    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (tmp_path / "app.slice" / "run.scope").mkdir(parents=True)
    (tmp_path / "app.slice" / "cgroup.subtree_control").write_text("cpu memory pids\n")
    found = _find_v2(tmp_path, {"": "/app.slice/run.scope"})
    assert found is not None and found.version == 2
    assert set(found.bases.values()) == {tmp_path / "app.slice" / "mcprl-envs"}
    assert (
        tmp_path / "app.slice" / "mcprl-envs" / "cgroup.subtree_control"
    ).read_text() == "+memory +pids +cpu"
    # a parent that does not hand memory down (a container's namespace root, often): rlimits instead
    (tmp_path / "cgroup.subtree_control").write_text("cpu\n")
    assert _find_v2(tmp_path, {"": "/"}) is None
    assert not (tmp_path / "mcprl-envs").exists()  # nothing made where it could not be used


def test_pending_groups_are_removed_once_empty_and_kept_while_busy(tmp_path: Path) -> None:
    """``retry_pending`` (bwrap's groups that outlived their environment): an empty group goes, a
    busy one stays listed, one removed by someone else drops off, and the list merges the new
    ones. A file inside a plain directory stands in for a process in a cgroup (rmdir fails)."""
    from actors.provisioners.limits import retry_pending

    pending = tmp_path / "envs" / "cgroups-pending"
    pending.parent.mkdir()
    empty, busy, gone = (tmp_path / "cg" / name for name in ("empty", "busy", "gone"))
    for group in (empty, busy):
        group.mkdir(parents=True)
    (busy / "cgroup.procs").write_text("4242\n")
    assert retry_pending(pending) == []  # nothing pending: no file made
    assert not pending.exists()
    assert retry_pending(pending, add=[str(busy), str(empty), str(gone)]) == [str(busy)]
    assert not empty.exists() and busy.is_dir()
    assert pending.read_text() == f"{busy}\n"
    (busy / "cgroup.procs").unlink()
    assert retry_pending(pending) == []
    assert not busy.exists() and pending.read_text() == ""


def test_a_base_where_no_group_can_be_made_is_named_with_its_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from actors.provisioners.limits import _usable

    not_a_dir = tmp_path / "mcprl-envs"
    not_a_dir.write_text("")  # a file where the group's parent should be: mkdir below it fails
    with caplog.at_level(logging.WARNING, logger="actors.provisioners.limits"):
        assert not _usable(not_a_dir)
    assert f"cannot make a cgroup below {not_a_dir} (ENOTDIR" in caplog.text
    assert _usable(tmp_path)  # a writable directory: the probe is made and removed
    assert list(tmp_path.iterdir()) == [not_a_dir]
