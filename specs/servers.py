"""MCP server registry: server name -> how to start it, in MCP-Universe's ``server_list.json`` shape.

A file maps each server name to an entry (MCP-Universe ``mcpuniverse/mcp/config.py``)::

    {"calculator": {"stdio": {"command": "python3", "args": ["-m", "mcp_server_calculator"]}},
     "google-search": {"stdio": {...}, "sse": {"command": "python3", "args": [..., "{{PORT}}"]},
                       "env": {"SERP_API_KEY": "{{SERP_API_KEY}}"}},
     "remote": {"http_url": "https://host/mcp", "headers": {"Authorization": "Bearer {{TOKEN}}"}},
     "duckdb": {"streamable_http": {"command": "mcp-server-motherduck",
                                    "args": ["--transport", "http", "--host", "{{HOST}}", "--port", "{{PORT}}"]}}}

``stdio`` and ``sse`` are commands (``sse`` starts the server as an SSE listener on ``{{PORT}}``);
``http_url``/``headers`` name an already running streamable-HTTP server. ``streamable_http`` (ours,
not MCP-Universe's) is a command that starts an HTTP-only server *inside* the environment,
listening on ``{{HOST}}:{{PORT}}`` (its ``path``, default ``/mcp``); the provisioner fills both per
environment (``Provisioner.listen_address``). ``launch`` picks one transport per server (``stdio``,
then ``streamable_http``, ``http_url``, ``sse``) and fills its templates. ``"keep_alive": true`` (ours, not
MCP-Universe's) declares a stdio server free of per-episode state, so that a reused environment
keeps it running across episodes (``ServerLaunch.keep_alive``).

Templates ``{{VAR}}`` (also ``{{ VAR }}``, as MCP-Universe renders them with Jinja) are filled from
the process environment at launch time, never at load time: a registry holds templates only, and
filled values live only in the ``ServerLaunch`` (whose repr hides them). No error message ever
contains a filled value. ``python``/``python3`` resolve to the running interpreter so that servers
installed in this virtual environment start; a relative command path (``.cache/servers/x/bin/python``,
a server's own virtual environment, needed when its ``mcp`` version differs from ours) resolves
against the current working directory, the project root.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import msgspec

from specs.env import HOST_PLACEHOLDER, PORT_PLACEHOLDER, ServerLaunch
from specs.errors import SpecError, raise_all, read_json_file, split_validation_error
from specs.templates import TEMPLATE

_PYTHON_NAMES = frozenset({"python", "python3", f"python{sys.version_info.major}.{sys.version_info.minor}"})


class CommandSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A command line (MCP-Universe ``CommandConfig``); args may hold ``{{VAR}}`` templates."""

    command: str
    args: tuple[str, ...] = ()


class ListenerSpec(CommandSpec, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A command that serves streamable HTTP on ``{{HOST}}:{{PORT}}`` at ``path``."""

    path: str = "/mcp"


class ServerEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One server of the registry, templates unfilled (safe to log)."""

    name: str
    stdio: CommandSpec | None = None
    sse: CommandSpec | None = None
    """Command that starts the server as an SSE listener (MCP-Universe fills ``{{PORT}}``)."""
    streamable_http: ListenerSpec | None = None
    """Command that starts the server as a streamable-HTTP listener inside the environment, on
    ``{{HOST}}:{{PORT}}`` (filled per environment by the provisioner)."""
    http_url: str | None = None
    """URL of a running streamable-HTTP server."""
    headers: dict[str, str] | None = None
    """HTTP headers for ``http_url``; values may hold templates (tokens)."""
    env: dict[str, str] = msgspec.field(default_factory=dict)
    """Environment variables for the server process; values may hold templates (secrets)."""
    keep_alive: bool = False
    """The stdio server holds no per-episode state: keep it across the episodes of a reused
    environment (``ServerLaunch.keep_alive``)."""

    def variables(self) -> list[str]:
        """Names of every template variable the entry uses, sorted."""
        texts: list[str] = list(self.env.values()) + list((self.headers or {}).values())
        for cmd in (self.stdio, self.sse, self.streamable_http):
            if cmd is not None:
                texts.extend([cmd.command, *cmd.args])
        if self.http_url:
            texts.append(self.http_url)
        return sorted({m.group(1) for t in texts for m in TEMPLATE.finditer(t)})


_ENTRY_FIELDS = ("stdio", "sse", "streamable_http", "http_url", "headers", "env", "keep_alive")
_TRANSPORT_FIELDS = ("stdio", "streamable_http", "http_url", "sse")
"""The entry's transports, in the order ``launch`` prefers them."""


class ServerRegistry:
    """Parsed server list of one file; ``launch`` fills templates inside the calling process."""

    def __init__(self, entries: Mapping[str, ServerEntry], file: str) -> None:
        self._entries = dict(entries)
        self.file = file

    def __repr__(self) -> str:
        return f"ServerRegistry(file={self.file!r}, servers={self.names()!r})"

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def entry(self, name: str) -> ServerEntry:
        """The parsed entry (templates unfilled); ``SpecError`` listing known names if unknown."""
        if name not in self._entries:
            known = ", ".join(self.names()) or "(none)"
            raise SpecError(self.file, f"server {name!r}", f"unknown MCP server; known servers: {known}")
        return self._entries[name]

    def launch(self, name: str, environ: Mapping[str, str] | None = None) -> ServerLaunch:
        """How to reach ``name``, templates filled from ``environ`` (default: os.environ).

        The transport is the entry's ``stdio`` command when it has one, else its ``streamable_http``
        command, else its ``http_url`` (streamable HTTP, with ``headers``), else its ``sse``
        command. A listener's ``{{HOST}}`` and ``{{PORT}}`` (and its URL's) are left for the
        provisioner, which starts one server per environment (``Provisioner.listen_address``)."""
        entry = self.entry(name)
        where = f"server {name!r}"
        source = dict(os.environ if environ is None else environ)
        fill = _Filler(source, self.file, name)
        env = {k: fill(v, f"{where}.env.{k}") for k, v in entry.env.items()}
        if entry.stdio is None and entry.streamable_http is None and entry.http_url:
            headers = {k: fill(v, f"{where}.headers.{k}") for k, v in (entry.headers or {}).items()}
            return ServerLaunch(
                name=name,
                transport="http",
                url=fill(entry.http_url, f"{where}.http_url"),
                headers=headers,
                env=env,
                secrets=fill.secrets(),
            )
        commands: tuple[tuple[Literal["stdio", "sse", "http"], str, CommandSpec | None], ...] = (
            ("stdio", "stdio", entry.stdio),
            ("http", "streamable_http", entry.streamable_http),
            ("sse", "sse", entry.sse),
        )
        transport, field, spec = next(c for c in commands if c[2] is not None)  # parsing demands one
        assert spec is not None
        url: str | None = None
        if transport != "stdio":  # a listener per environment: the provisioner fills its address
            fill.public |= {"PORT": PORT_PLACEHOLDER, "HOST": HOST_PLACEHOLDER}
            path = spec.path if isinstance(spec, ListenerSpec) else "/sse"
            url = f"http://{HOST_PLACEHOLDER}:{PORT_PLACEHOLDER}{path}"
        command = fill(spec.command, f"{where}.{field}.command", secret=False)
        args = tuple(fill(a, f"{where}.{field}.args[{i}]", secret=False) for i, a in enumerate(spec.args))
        if command in _PYTHON_NAMES:
            command = sys.executable
        elif "/" in command and not os.path.isabs(command):
            # A server's own virtual environment inside the project (".cache/servers/x/bin/python"):
            # absolute, because the provisioner starts the server in the environment's workdir.
            command = os.path.abspath(command)
        return ServerLaunch(
            name=name,
            command=command,
            args=args,
            env=env,
            transport=transport,
            url=url,
            secrets=fill.secrets(),
            keep_alive=entry.keep_alive and transport == "stdio",
        )


class _Filler:
    """Fills ``{{VAR}}`` from a mapping; a missing or empty variable is a ``SpecError`` naming it.
    Remembers the values it filled into ``env``, ``headers`` and URLs (``secrets()``: the gateway
    redacts them); values on a command line and ``public`` variables are not secrets."""

    def __init__(self, environ: Mapping[str, str], file: str, server: str) -> None:
        self._environ = environ
        self._file = file
        self._server = server
        self.public: dict[str, str] = {}
        self._filled: set[str] = set()

    def __call__(self, text: str, where: str, *, secret: bool = True) -> str:
        """``secret=False`` for a command line: it is visible to every local user (``ps``) anyway,
        and redacting a path or a flag from observations would only corrupt them."""

        def sub(match: re.Match[str]) -> str:
            var = match.group(1)
            if var in self.public:
                return self.public[var]
            value = self._environ.get(var, "")
            if not value:  # MCP-Universe also treats an empty variable as unset
                raise SpecError(
                    self._file,
                    where,
                    f"environment variable {var} is not set (needed by MCP server {self._server!r})",
                )
            if secret:
                self._filled.add(value)
            return value

        return TEMPLATE.sub(sub, text)

    def secrets(self) -> tuple[str, ...]:
        return tuple(sorted(self._filled, key=lambda v: (-len(v), v)))  # longest first, for redaction


def _parse_entry(name: str, raw: Any, file: str) -> ServerEntry:
    where = f"server {name!r}"
    if not isinstance(raw, dict):
        raise SpecError(
            file, where, f"expected an object with {', '.join(_ENTRY_FIELDS)}, got {type(raw).__name__}"
        )
    unknown = [k for k in raw if k not in _ENTRY_FIELDS and not str(k).startswith("_")]
    if unknown:
        raise SpecError(
            file, f"{where}.{unknown[0]}", f"unknown field; accepted fields: {', '.join(_ENTRY_FIELDS)}"
        )
    known = {k: v for k, v in raw.items() if k in _ENTRY_FIELDS}
    if not any(known.get(k) for k in _TRANSPORT_FIELDS):
        raise SpecError(
            file, where, "needs at least one transport: 'stdio', 'streamable_http', 'http_url' or 'sse'"
        )
    try:
        return msgspec.convert({"name": name, **known}, ServerEntry)
    except msgspec.ValidationError as e:
        raise SpecError(file, *split_validation_error(e, where)) from None


def parse_server_registry(data: Any, file: str) -> ServerRegistry:
    """Validate a decoded server list; every bad entry is reported (``SpecErrors`` when several)."""
    if not isinstance(data, dict):
        raise SpecError(
            file,
            "top level",
            f"expected an object mapping server names to entries, got {type(data).__name__}",
        )
    entries: dict[str, ServerEntry] = {}
    problems: list[SpecError] = []
    for name, raw in data.items():
        if str(name).startswith("_"):
            continue
        try:
            entries[name] = _parse_entry(name, raw, file)
        except SpecError as e:
            problems.append(e)
    raise_all(problems)
    return ServerRegistry(entries, file)


def load_server_registry(path: str | os.PathLike[str]) -> ServerRegistry:
    """Load a ``server_list.json``-shaped file; ``SpecError`` on unreadable JSON or bad entries."""
    return parse_server_registry(read_json_file(path), str(path))


def load_server_registries(paths: Sequence[str]) -> ServerRegistry:
    """One registry of several files (a run mixing domains); a name two files give differently is
    a ``SpecError`` naming both (the same entry twice is fine: a shared third-party server)."""
    if len(paths) == 1:
        return load_server_registry(paths[0])
    entries: dict[str, ServerEntry] = {}
    source: dict[str, str] = {}
    for path in dict.fromkeys(paths):
        registry = load_server_registry(path)
        for name in registry.names():
            entry = registry.entry(name)
            if name in entries and entries[name] != entry:
                raise SpecError(
                    path, f"server {name!r}", f"differs from the entry of the same name in {source[name]}"
                )
            entries[name], source[name] = entry, path
    return ServerRegistry(entries, " + ".join(dict.fromkeys(paths)))
