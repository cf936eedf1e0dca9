# Shared helpers for the end-to-end shell tests. Each test sources this file.
# SOFTHCA (the CLI) and SOFTHCA_PREFIX come from CTest's environment.
set -euo pipefail

: "${SOFTHCA:?SOFTHCA must name the softhca binary}"
: "${SOFTHCA_PREFIX:?SOFTHCA_PREFIX must name the instance}"

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# The engine's pid, read from the instance's pid file.
engine_pid() {
    cat "${SOFTHCA_RUN_ROOT:-/run/softhca}/$SOFTHCA_PREFIX/engine.pid"
}

# Prints "pd mr cq" totals from `softhca status`.
object_counts() {
    "$SOFTHCA" status | awk '/^objects:/ {print $3, $5, $7}'
}

# Waits up to $2 seconds (default 10) for the command in $1 to succeed.
wait_until() {
    local deadline=$((SECONDS + ${2:-10}))
    until eval "$1"; do
        [ $SECONDS -lt $deadline ] || return 1
        sleep 0.1
    done
}

# Two ends of a connection: by default both devices of one instance on this host;
# test_two_namespaces.sh points them at two engines in two network namespaces.
SERVER_PREFIX=${SERVER_PREFIX:-$SOFTHCA_PREFIX}
CLIENT_PREFIX=${CLIENT_PREFIX:-$SOFTHCA_PREFIX}
SERVER_DEV=${SERVER_DEV:-${SOFTHCA_PREFIX}0}
CLIENT_DEV=${CLIENT_DEV:-${SOFTHCA_PREFIX}1}
SERVER_ADDR=${SERVER_ADDR:-127.0.0.1}
on_server() {
    if [ -n "${SERVER_NS:-}" ]; then
        ip netns exec "$SERVER_NS" "$SOFTHCA" exec --prefix "$SERVER_PREFIX" -- "$@"
    else
        "$SOFTHCA" exec --prefix "$SERVER_PREFIX" -- "$@"
    fi
}
on_client() {
    if [ -n "${CLIENT_NS:-}" ]; then
        ip netns exec "$CLIENT_NS" "$SOFTHCA" exec --prefix "$CLIENT_PREFIX" -- "$@"
    else
        "$SOFTHCA" exec --prefix "$CLIENT_PREFIX" -- "$@"
    fi
}

# Two hosts from tools/netns-pair.sh: `pair_hosts NAME` makes the server the engine in
# NAME-a (device NAMEa0, 198.18.2.1) and the client the one in NAME-b, for on_server,
# on_client and the pingpong and perftest scripts; `pair_up NAME` brings a fresh pair up
# (one of that name goes down first), with what SOFTHCA_PAIR_PORT, SOFTHCA_PAIR_MTU,
# SOFTHCA_UP_ARGS, SOFTHCA_UP_ARGS_A and SOFTHCA_UP_ARGS_B say; `pair_down NAME` takes it
# down.
NETNS_PAIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/tools/netns-pair.sh"
pair_hosts() {
    export SERVER_NS="$1-a" CLIENT_NS="$1-b" SERVER_PREFIX="${1}a" CLIENT_PREFIX="${1}b"
    export SERVER_DEV="${1}a0" CLIENT_DEV="${1}b0" SERVER_ADDR=198.18.2.1
}
pair_down() { SOFTHCA="$SOFTHCA" "$NETNS_PAIR" down "$1" >/dev/null 2>&1 || true; }
pair_up() {
    pair_down "$1"
    SOFTHCA="$SOFTHCA" "$NETNS_PAIR" up "$1" >/dev/null ||
        fail "netns-pair up failed (${SOFTHCA_PAIR_PORT:-af_packet} ports, MTU ${SOFTHCA_PAIR_MTU:-1500})"
}

# The bytes the server's and the client's devices have sent, "SERVER CLIENT", from the
# engine's counters (`softhca status`): what left their ports, and what their QPs placed
# themselves (single copy: between two devices of one engine RDMA WRITEs and READs cross
# no port).
devices_tx_bytes() {
    local dev
    for dev in "$SERVER_DEV" "$CLIENT_DEV"; do
        "$SOFTHCA" status | awk -v d="device $dev " 'index($0, d) == 1 {f = 1; next}
            f && /counters:/ {for (i = 1; i < NF; i++) if ($i == "tx_bytes") sent = $(i + 1)}
            f && /placed:/ {for (i = 1; i < NF; i++) if ($i == "bytes") print sent + $(i + 1); exit}'
    done | paste -sd ' '
}

# Fails with "the devices did not carry WHAT" unless each device sent at least LEAST bytes
# since BEFORE (what devices_tx_bytes printed then): a program that found another way
# than softhca's devices fails.
#   require_devices_sent BEFORE LEAST WHAT
require_devices_sent() {
    local before0 before1 now0 now1
    read -r before0 before1 <<<"$1"
    read -r now0 now1 <<<"$(devices_tx_bytes)"
    [ -n "$before1" ] && [ -n "$now1" ] || fail "no tx_bytes counter for $SERVER_DEV or $CLIENT_DEV"
    echo "sent: $SERVER_DEV $((now0 - before0)) B, $CLIENT_DEV $((now1 - before1)) B (at least $2 each)"
    [ $((now0 - before0)) -ge "$2" ] && [ $((now1 - before1)) -ge "$2" ] ||
        fail "the devices did not carry $3"
}

# Whether something listens on TCP port $1 on the server's host.
port_in_use() {
    if [ -n "${SERVER_NS:-}" ]; then
        ip netns exec "$SERVER_NS" ss -Hltn "sport = :$1" | grep -q .
    else
        ss -Hltn "sport = :$1" | grep -q .
    fi
}

# A TCP port for a tool's connection exchange that nothing listens on yet. Tests run
# side by side: a port another test's server holds would pass wait_listening and send
# this test's client to the wrong server. Below the kernel's ephemeral range (32768 and
# up by default): a port from it can be taken by any outgoing connection between this
# look and the server's bind ("Couldn't listen to port 40548" failed a fabric test).
free_port() {
    local port i
    for i in $(seq 100); do
        port=$((20000 + RANDOM % 12000))
        port_in_use "$port" || {
            echo "$port"
            return 0
        }
    done
    fail "no free TCP port found"
}

# Waits (up to 20 s) until a TCP port listens on the server's host: perftest and the
# pingpongs exchange their connection data over TCP, and a client that comes too
# early fails.
wait_listening() {
    local port=$1 i
    for i in $(seq 200); do
        port_in_use "$port" && return 0
        sleep 0.1
    done
    return 1
}

# perftest fits its cycle counter against gettimeofday when it prints its report; on a
# loaded machine the fit can miss (r^2 < 0.9, "Can't produce a report") after a transfer
# that went through. That is perftest's clock, not the HCA: tests run such a run again
# (PERFTEST_ATTEMPTS times in all, 3 by default), and nothing else.
perftest_clock_failed() {
    grep -q "Correlation coefficient r^2" <<<"$*"
}
PERFTEST_ATTEMPTS=${PERFTEST_ATTEMPTS:-3}

# Waits for a perftest process of a test that measures through the engine's status: it must
# exit 0, or fail only on perftest's clock (the transfer went through; its report did not).
#   perftest_wait PID OUTPUT_FILE WHAT
perftest_wait() {
    wait "$1" || perftest_clock_failed "$(cat "$2")" || fail "$3 failed: $(cat "$2")"
}

# How many QPs of a `softhca status --json` document on stdin have sent a packet (DEVICE's
# only, when named).
#   qps_sending [DEVICE]
qps_sending() {
    python3 -c '
import json, sys
print(sum(1 for c in json.load(sys.stdin)["contexts"] if sys.argv[1] in ("", c["device"])
          for q in c["qps"] if q["counters"]["packets_sent"] > 0))' "${1:-}"
}

# perftest 4.5's -R server opens its data QP's listener only after the connection for its
# own exchange, and its client does not wait for it: a client faster than the server meets
# no listener (REJECTED, reason 8; for UD the SIDR status 1, UNREACHABLE). The tool's race,
# not the HCA's (later perftest retries: retry_rdma_connect). With -c UD the client's
# first connection reports it as "Unexpected CM event bl blka 8" (REJECTED) or 7
# (UNREACHABLE), without the reason.
perftest_listener_race() {
    grep -qE "REJECTED; error: 8|UNREACHABLE; error: 1|Unexpected CM event bl blka [78]$" <<<"$*"
}

# Runs "$@", one exchange that returns 0 when it passed and leaves what its programs printed
# in PERFTEST_OUTPUT, again while it failed only on perftest's clock or, with -R, on
# perftest's listener race. Its last status.
perftest_attempts() {
    local attempt rc
    for attempt in $(seq "$PERFTEST_ATTEMPTS"); do
        rc=0
        "$@" || rc=$?
        [ "$rc" -eq 0 ] && return 0
        [ "$attempt" -lt "$PERFTEST_ATTEMPTS" ] || return "$rc"
        if perftest_clock_failed "${PERFTEST_OUTPUT:-}"; then
            echo "perftest could not calibrate its clock (attempt $attempt): running again" >&2
        elif perftest_listener_race "${PERFTEST_OUTPUT:-}"; then
            echo "perftest -R's listener race (no listener yet, attempt $attempt): running again" >&2
        else
            return "$rc"
        fi
    done
}
