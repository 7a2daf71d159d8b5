"""The stdio bridge to a process in a container: ``<bridge> --container C --env-id E -- cmd args``.

The docker provisioner's ``stdio_launch`` returns this as the command that "is" an MCP server:
it starts ``cmd args`` in the container as an attached exec (through the Engine API, no ``docker``
CLI), copies its own stdin to the exec's stdin (EOF included), the exec's stdout and stderr to its
own, and exits with the exec's exit code. The variables named by ``--pass-env`` are copied from the
bridge's environment into the exec's (so secrets never sit on a command line).

On SIGTERM or SIGINT (the MCP client's way to stop a server that ignored EOF) it kills the exec's
process tree before it exits, so a hung server does not live on inside the container.
"""

from __future__ import annotations

import argparse
import io
import os
import signal
import socket
import sys
import threading
from typing import Any, cast

from docker.utils.socket import STDERR, STDOUT, frames_iter

from actors.provisioners.docker_exec import exit_code, kill_exec, open_exec


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="docker_attach", description=__doc__.splitlines()[0])
    parser.add_argument("--container", required=True)
    parser.add_argument("--env-id", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--url", default=None, help="Docker API URL (default: $DOCKER_HOST)")
    parser.add_argument("--pass-env", default="", help="comma-separated names copied into the exec")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("a command is needed after --")
    url = args.url or os.environ.get("DOCKER_HOST")
    names = [n for n in args.pass_env.split(",") if n]
    environ = {n: os.environ[n] for n in names if n in os.environ}
    exec_id, sock = open_exec(args.env_id, url, args.container, command, environ, args.workdir, stdin=True)

    def stop(signum: int, _frame: Any) -> None:
        kill_exec(url, exec_id, args.env_id)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    threading.Thread(target=_pump_stdin, args=(sock,), daemon=True).start()
    outputs = {STDOUT: sys.stdout.buffer, STDERR: sys.stderr.buffer}
    for stream, payload in frames_iter(sock, tty=False):  # the SDK's demultiplexing
        out = outputs.get(stream)
        if out is not None:
            out.write(payload)
            out.flush()
    return exit_code(url, exec_id)


def _pump_stdin(sock: socket.socket) -> None:
    stdin = cast(io.BufferedReader, sys.stdin.buffer)
    try:
        while chunk := stdin.read1(65536):
            sock.sendall(chunk)
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # the exec ended: its output loop sees the end too


if __name__ == "__main__":
    sys.exit(main())
