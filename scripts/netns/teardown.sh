#!/usr/bin/env bash
# Undoes setup.sh NAME_PREFIX: stops the relay (SIGTERM), prints its per-direction summary, deletes the
# two namespaces and the state directory. Safe to run on a partial or missing setup.
#
#   teardown.sh NAME_PREFIX     (as root; NETNS_STATE_DIR as given to setup.sh)
#
# Prints the relay's summary on stdout:
#   a->b (${P}ta -> ${P}tb): forwarded N, dropped N, duplicated N, reordered N, corrupted N
#   b->a (${P}tb -> ${P}ta): forwarded N, dropped N, duplicated N, reordered N, corrupted N
# and the relay's other log lines (start line, warnings) on stderr.
set -uo pipefail

[ $# -eq 1 ] || { echo "usage: teardown.sh NAME_PREFIX" >&2; exit 1; }
P=$1
[[ $P =~ ^[A-Za-z0-9_-]{1,13}$ ]] || { echo "teardown.sh: bad NAME_PREFIX" >&2; exit 1; }
STATE_DIR=${NETNS_STATE_DIR:-/run/roce-netem/$P}
PID_FILE=$STATE_DIR/relay.pid
LOG_FILE=$STATE_DIR/relay.log

# Running and not a zombie.
alive() { [ -r "/proc/$1/stat" ] && ! grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat"; }

if [ -f "$PID_FILE" ]; then
    pid=$(cat "$PID_FILE")
    if [[ $pid =~ ^[0-9]+$ ]] && alive "$pid" && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = roce-netem ]; then
        kill -TERM "$pid"
        for _ in $(seq 100); do
            alive "$pid" || break
            sleep 0.05
        done
        if alive "$pid"; then
            echo "teardown.sh: relay $pid ignored SIGTERM for 5 s; killing it" >&2
            kill -KILL "$pid" 2>/dev/null
        fi
    else
        echo "teardown.sh: relay (pid $pid) was not running" >&2
    fi
fi
if [ -f "$LOG_FILE" ]; then
    # Give the exiting relay a moment to finish writing its summary.
    for _ in $(seq 20); do
        grep -q '^b->a' "$LOG_FILE" && break
        sleep 0.05
    done
    grep -E '^(a->b|b->a) ' "$LOG_FILE" || echo "teardown.sh: the relay printed no summary" >&2
    grep -vE '^(a->b|b->a) ' "$LOG_FILE" | sed 's/^/relay: /' >&2
fi

for ns in "${P}a" "${P}b"; do
    if [ -e "/run/netns/$ns" ]; then
        ip netns del "$ns" || echo "teardown.sh: could not delete namespace $ns" >&2
    fi
done
# Only left if the relay died between creating and moving them (they are not persistent).
for dev in "${P}ta" "${P}tb"; do
    ip link show dev "$dev" >/dev/null 2>&1 && ip link del dev "$dev" 2>/dev/null
done

rm -f "$PID_FILE" "$LOG_FILE"
rmdir "$STATE_DIR" 2>/dev/null
exit 0
