#!/usr/bin/env bash
# Podman's Docker-compatible API service, for the docker backend where no Docker engine runs.
#   launch/podman_service.sh [SOCKET]      (default: /run/mcprl/podman.sock)
# Installs podman, runc and iptables (which guards the networks of containers whose servers
# listen, actors/provisioners/docker_network.py) if missing (Debian/Ubuntu, as root), writes a containers.conf that
# works on hosts where crun fails (cgroups v1/v2 hybrid) if there is none, starts the service
# unless it already answers, waits (bounded) until it does, and prints the DOCKER_HOST to use.
# The service it starts runs on after it exits; its process id goes to stderr and, where
# PODMAN_SERVICE_PIDFILE names a file, into that file, so the caller can stop it by its pid
# (`kill "$(cat "$PODMAN_SERVICE_PIDFILE")"`). A service that already answered is not its own:
# then it writes no pid file.
set -euo pipefail
SOCK=${1:-/run/mcprl/podman.sock}
LOG=${PODMAN_SERVICE_LOG:-/tmp/mcprl-podman-service.log}
PIDFILE=${PODMAN_SERVICE_PIDFILE:-}

if ! command -v podman >/dev/null || ! command -v runc >/dev/null || ! command -v iptables >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc iptables >/dev/null
fi
CONF=/etc/containers/containers.conf
if [ ! -e "$CONF" ]; then
    mkdir -p /etc/containers
    cat > "$CONF" <<'EOF'
# Written by mcprl's launch/podman_service.sh: runc and cgroupfs work where crun does not.
[containers]
default_ulimits = []

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
EOF
fi

answers() { curl -sf --max-time 2 --unix-socket "$SOCK" http://d/_ping >/dev/null 2>&1; }
if ! answers; then
    mkdir -p "$(dirname "$SOCK")"
    rm -f "$SOCK"
    # No job control in a script: the background child leads no process group, so setsid makes
    # it a session leader without forking and $! is the service's own pid.
    setsid podman system service --time=0 "unix://$SOCK" >"$LOG" 2>&1 < /dev/null &
    pid=$!
    if [ -n "$PIDFILE" ]; then echo "$pid" > "$PIDFILE"; fi
    echo "podman service on $SOCK: pid $pid${PIDFILE:+ (in $PIDFILE)}" >&2
    for _ in $(seq 100); do answers && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    answers || { echo "podman service (pid $pid) did not answer on $SOCK; see $LOG" >&2; exit 1; }
fi
echo "DOCKER_HOST=unix://$SOCK"
