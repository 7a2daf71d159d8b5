"""Build contexts of the docker backend's images, as deterministic tars: equal content, equal tag.

``hostroot_context``: the host-root image (empty mount points, ``/bin``, ``/lib``... as the host has
them); ``dockerfile_context``: a task's Dockerfile with its directory; ``tag``: the content tag.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

from actors.errors import EnvError

WORKDIR = "/workspace"
"""The working directory inside every container (an empty mount point of the host-root image)."""


def tag(repo: str, context: bytes, build_args: dict[str, str] | None = None) -> str:
    digest = hashlib.sha256(context)
    digest.update(json.dumps(build_args or {}, sort_keys=True).encode())
    return f"{repo}:{digest.hexdigest()[:16]}"


@functools.cache
def hostroot_context() -> bytes:
    """A build context for the host-root image: empty mount points, and ``/bin``, ``/lib``... as
    the host has them (symlinks into ``/usr`` on merged-usr systems)."""
    dockerfile = b"FROM scratch\nCOPY rootfs/ /\n"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        _add(tar, "Dockerfile", data=dockerfile)
        for name in (
            "rootfs",
            *(f"rootfs/{d}" for d in (WORKDIR.strip("/"), "tmp", "etc", "usr", "proc", "dev", "sys", "run")),
        ):
            _add(tar, name, kind=tarfile.DIRTYPE)
        for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
            if os.path.islink(top):
                _add(tar, f"rootfs{top}", kind=tarfile.SYMTYPE, link=os.readlink(top))
            elif os.path.isdir(top):
                _add(tar, f"rootfs{top}", kind=tarfile.DIRTYPE)
    return buf.getvalue()


def dockerfile_context(dockerfile_path: str, build_args: dict[str, str]) -> bytes:
    """The build context of a task's Dockerfile: its directory, with the Dockerfile as ``Dockerfile``
    (deterministic tar, so equal content gives an equal tag)."""
    dockerfile = Path(dockerfile_path)
    if not dockerfile.is_file():
        raise EnvError(f"docker backend: dockerfile_path {dockerfile_path!r} is not a file")
    root = dockerfile.resolve().parent
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        _add(tar, "Dockerfile", data=dockerfile.read_bytes())
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root).as_posix()
            if path == dockerfile.resolve() or rel == "Dockerfile" or not path.is_file():
                continue
            _add(tar, rel, data=path.read_bytes(), mode=path.stat().st_mode & 0o777)
    return buf.getvalue()


def _add(
    tar: tarfile.TarFile,
    name: str,
    *,
    data: bytes = b"",
    kind: bytes = tarfile.REGTYPE,
    link: str = "",
    mode: int = 0o755,
) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode, info.mtime = kind, link, mode, 0
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
