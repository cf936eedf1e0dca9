# A Linux kernel RDMA peer for the end-to-end tests: Soft-RoCE (rdma_rxe, kernel 6.1) in a
# QEMU guest (tools/rxe-guest.sh), on the same L2 segment as a softhca af_packet port.
# Sourced after lib.sh. One network namespace NS holds everything:
#
#   softhca engine --af_packet-- NSv0 ==veth== NSv1 --+
#                                                      +-- NSbr (198.18.S.1: TCP side channel)
#   guest eth0 (198.18.S.2, rxe0) --virtio-- NSt0 ---+
#
# softhca's port is 198.18.S.3. The guest boots once per test and runs an interactive
# shell on its serial console; kp_guest sends it one command line at a time and waits for
# the command's exit status, so one boot serves every exchange of a test.
#
#   kp_up NS S [softhca up options...]   set up, boot, wait for rxe0
#   kp_guest SECONDS 'COMMAND'           run COMMAND in the guest; its output on stdout
#   kp_guest_start 'COMMAND'             start COMMAND in the guest (KP_JOB is its number)
#   kp_guest_wait JOB SECONDS            wait for a started command; its output on stdout
#   kp_guest_server 'COMMAND' 'READY'    a server in the guest, returns once READY holds
#   kp_exchange SIDE READY 'SERVER' 'CLIENT'  one server/client run, either side serving
#   kp_tool SIDE TOOL ARGS...            kp_exchange for a pingpong or perftest tool
#   kp_on_softhca COMMAND...             run a verbs program against the softhca device
#   kp_down                              stop guest and engine, delete the namespace
#
# After kp_up: KP_DEV (softhca device), KP_GUEST_ADDR, KP_SOFTHCA_ADDR, KP_BRIDGE_ADDR,
# KP_GUEST_GID (rxe0's GID index for its IPv4 address). With KP_IPV6=1 both also get an
# IPv6 address, 2001:2:0:S::2 (guest) and ::3 (softhca; the IPv6 benchmarking range, RFC
# 5180): KP_GUEST_ADDR6, KP_SOFTHCA_ADDR6, KP_GUEST_GID6 and KP_SOFTHCA_GID6 (their GID
# indices). kp_exchange uses KP_GUEST_GID and KP_SOFTHCA_GID (default 0) for @GID@. With
# KP_PORT=udp softhca has a kernel UDP socket port on the bridge's addresses (198.18.S.1,
# 2001:2:0:S::1) instead of the af_packet port. KP_GUEST_NO_VLAN_FILTER=1: the guest's NIC
# passes tagged frames (kp_up says why).

kp_repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

kp_up() {
    KP_NS=$1
    local subnet=$2
    shift 2
    KP_BRIDGE_ADDR="198.18.$subnet.1" KP_GUEST_ADDR="198.18.$subnet.2"
    KP_SOFTHCA_ADDR="198.18.$subnet.3" KP_DEV="${KP_NS}0"
    # KP_PORT=udp: softhca on a kernel UDP socket port bound to the bridge's own
    # addresses (the host kernel routes to the guest) instead of the af_packet port.
    local port_kind=${KP_PORT:-af_packet}
    [ "$port_kind" = udp ] && KP_SOFTHCA_ADDR=$KP_BRIDGE_ADDR
    local addresses=$KP_SOFTHCA_ADDR
    if [ -n "${KP_IPV6:-}" ]; then
        KP_GUEST_ADDR6="2001:2:0:$subnet::2" KP_SOFTHCA_ADDR6="2001:2:0:$subnet::3"
        [ "$port_kind" = udp ] && KP_SOFTHCA_ADDR6="2001:2:0:$subnet::1"
        addresses+=",$KP_SOFTHCA_ADDR6"
    fi
    KP_DIR=$(mktemp -d)
    echo 0 >"$KP_DIR/seq"
    local guest
    guest=$("$kp_repo/tools/rxe-guest.sh") || fail "the rxe guest could not be built"
    local src=${SOFTHCA_RXE_GUEST_SRC:-$kp_repo/tools/rxe-guest}
    local run_guest="$src/run.sh"
    # KP_GUEST_NO_VLAN_FILTER=1: the guest's virtio NIC without a VLAN filter (QEMU's
    # ctrl_vlan=off). With the filter QEMU drops every tagged frame whose VID the guest did
    # not register, and this guest's kernel has no 8021q module to register VID 0 (as a
    # NIC with a VLAN filter drops priority-tagged frames on a host without 8021q). Without
    # it the guest's kernel takes a VID 0 frame as untagged (802.1Q priority tagging).
    if [ -n "${KP_GUEST_NO_VLAN_FILTER:-}" ]; then
        run_guest=$KP_DIR/run.sh
        sed 's/-device virtio-net-pci,netdev=n0,mac="$mac"/&,ctrl_vlan=off/' "$src/run.sh" \
            >"$run_guest"
        chmod +x "$run_guest"
        grep -q "ctrl_vlan=off" "$run_guest" ||
            fail "could not turn the guest NIC's VLAN filter off in $src/run.sh"
    fi
    kp_down_quiet
    ip netns add "$KP_NS"
    local n="ip -n $KP_NS"
    $n link set lo up
    # No MLD snooping: softhca joins no solicited-node group, and neighbour solicitations
    # for its IPv6 address must reach it (a bridge without a querier floods them anyway).
    $n link add "${KP_NS}br" type bridge mcast_snooping 0
    $n tuntap add dev "${KP_NS}t0" mode tap
    $n link add "${KP_NS}v0" type veth peer name "${KP_NS}v1"
    $n link set "${KP_NS}t0" master "${KP_NS}br"
    $n link set "${KP_NS}v1" master "${KP_NS}br"
    for l in br t0 v0 v1; do $n link set "${KP_NS}$l" up; done
    # The guest (QEMU without KVM) drains its tap far slower than softhca fills it; a
    # switch-sized queue keeps UC's bursts (perftest posts 128 messages at once) whole.
    $n link set "${KP_NS}t0" txqueuelen 10000
    $n addr add "$KP_BRIDGE_ADDR/24" dev "${KP_NS}br"
    local device="net_af_packet0,iface=${KP_NS}v0"
    if [ "$port_kind" = udp ]; then
        device=udp
        [ -n "${KP_IPV6:-}" ] && $n -6 addr add "$KP_SOFTHCA_ADDR6/64" dev "${KP_NS}br" nodad
    fi
    ip netns exec "$KP_NS" "$SOFTHCA" up --prefix "$KP_NS" --port "$device@$addresses" "$@" \
        >/dev/null || fail "softhca up on $device@$addresses failed"
    # The guest reads its console from a FIFO this shell holds open. A guest that is gone
    # must fail a write with EPIPE (and the test with a message), not kill the test.
    trap '' PIPE
    mkfifo "$KP_DIR/console"
    RXE_GUEST_TIMEOUT=${KP_GUEST_TIMEOUT:-900} ip netns exec "$KP_NS" "$run_guest" "$guest" \
        "${KP_NS}t0" "$KP_GUEST_ADDR" "52:54:00:12:$(printf %02x "$subnet"):02" sh \
        <"$KP_DIR/console" >"$KP_DIR/log" 2>&1 &
    KP_QEMU=$!
    exec {KP_FD}>"$KP_DIR/console"
    wait_until "grep -q RXE-READY '$KP_DIR/log'" 120 ||
        fail "the rxe guest did not come up: $(tail -20 "$KP_DIR/log")"
    # No echo of what is typed, no prompt: the console then carries only output.
    printf '%s\n' 'stty -echo; PS1=""' >&"$KP_FD"
    kp_guest 20 true >/dev/null || fail "guest shell setup: $(tail -20 "$KP_DIR/log")"
    local gids
    gids=$(kp_guest 30 'ibv_devinfo -v -d rxe0') || fail "ibv_devinfo in the guest"
    KP_GUEST_GID=$(sed -n "s/.*GID\[ *\([0-9]*\)\]:.*::ffff:$KP_GUEST_ADDR.*/\1/p" <<<"$gids" | head -1)
    [ -n "$KP_GUEST_GID" ] || fail "no IPv4 GID on rxe0: $gids"
    echo "kernel peer: rxe0 at $KP_GUEST_ADDR (GID index $KP_GUEST_GID), $KP_DEV at $KP_SOFTHCA_ADDR"
    [ -n "${KP_IPV6:-}" ] && kp_up_ipv6
    return 0
}

# The guest's IPv6 address, once its duplicate address detection is done and rxe0 has
# the GID for it; the GID indices of both sides.
kp_up_ipv6() {
    kp_guest 10 "ip -6 addr add $KP_GUEST_ADDR6/64 dev eth0" >/dev/null ||
        fail "no IPv6 address for the guest"
    local gids i
    for i in $(seq 60); do
        gids=$(kp_guest 30 'ibv_devinfo -v -d rxe0') || fail "ibv_devinfo in the guest"
        KP_GUEST_GID6=$(sed -n "s/.*GID\[ *\([0-9]*\)\]:[[:space:]]*$KP_GUEST_ADDR6, RoCE v2.*/\1/p" \
            <<<"$gids" | head -1)
        [ -n "$KP_GUEST_GID6" ] && break
        sleep 0.5
    done
    [ -n "$KP_GUEST_GID6" ] || fail "no RoCE v2 GID on rxe0 for $KP_GUEST_ADDR6: $gids"
    gids=$(kp_on_softhca ibv_devinfo -v -d "$KP_DEV") || fail "ibv_devinfo on softhca"
    KP_SOFTHCA_GID6=$(sed -n "s/.*GID\[ *\([0-9]*\)\]:[[:space:]]*$KP_SOFTHCA_ADDR6, RoCE v2.*/\1/p" \
        <<<"$gids" | head -1)
    [ -n "$KP_SOFTHCA_GID6" ] || fail "no GID on $KP_DEV for $KP_SOFTHCA_ADDR6: $gids"
    echo "kernel peer over IPv6: rxe0 at $KP_GUEST_ADDR6 (GID $KP_GUEST_GID6), $KP_DEV at" \
        "$KP_SOFTHCA_ADDR6 (GID $KP_SOFTHCA_GID6)"
}

kp_guest_start() {
    # The count lives in a file: kp_guest often runs in a command substitution's subshell.
    KP_JOB=$(($(cat "$KP_DIR/seq") + 1))
    echo "$KP_JOB" >"$KP_DIR/seq"
    # The markers are split in the command line so that only the output carries them.
    local cmd=${1//@JOB@/$KP_JOB}
    printf '%s\n' "echo \"KP\"\"BEGIN$KP_JOB\"; ( $cmd ) </dev/null 2>&1; echo \"KP\"\"END$KP_JOB \$?\"" >&"$KP_FD"
}

kp_guest_wait() {
    local job=$1 seconds=$2
    wait_until "grep -qa 'KPEND$job ' '$KP_DIR/log'" "$seconds" || {
        # A command the guest never began: its console lost part of the line (a serial
        # port under QEMU without KVM on a loaded machine drops input; a lost quote leaves
        # the shell waiting for the rest). kernel_peer_run.sh runs such a test once more.
        tr -d '\r' <"$KP_DIR/log" | grep -qax "KPBEGIN$job" ||
            echo "GUEST CONSOLE STALLED: the guest never began command $job" >&2
        echo "guest command $job did not end within $seconds s; console:" >&2
        tail -30 "$KP_DIR/log" | tr -d '\r' >&2
        return 124
    }
    tr -d '\r' <"$KP_DIR/log" | sed -n "/KPBEGIN$job\$/,/^KPEND$job /p" | sed '1d;$d'
    local rc
    rc=$(tr -d '\r' <"$KP_DIR/log" | sed -n "s/^KPEND$job \([0-9]*\)\$/\1/p")
    return "${rc:-1}"
}

# A server in the guest: starts COMMAND there and returns once READY (a shell test run in
# the guest, e.g. that a TCP port listens) holds, so that a client on the softhca side can
# connect at once; KP_JOB names it for kp_guest_wait. The guest's shell waits for the
# server within the same command line, so it reads no input while the server runs: with
# the server in its background instead, the shell saw end of input when ucmatose's server
# exited, and powered the guest off. A server whose client failed is therefore not killed
# from here: bound it with `timeout` in COMMAND.
kp_guest_server() {
    local cmd=$1 ready=$2 seconds=${3:-30}
    kp_guest_start "$cmd & p=\$!; i=0; until $ready; do i=\$((i + 1)); [ \$i -lt 300 ] || break; sleep 0.1; done; echo KP\"\"READY@JOB@; wait \$p"
    wait_until "grep -qaw 'KPREADY$KP_JOB' '$KP_DIR/log'" "$seconds" ||
        fail "guest server did not get ready: $(tail -20 "$KP_DIR/log" | tr -d '\r')"
}

# A guest test for kp_guest_server: TCP port $1 listens.
kp_tcp_listening() {
    echo "netstat -ltn | grep -q ':$1 '"
}

kp_guest() {
    kp_guest_start "$2"
    kp_guest_wait "$KP_JOB" "$1"
}

kp_on_softhca() {
    ip netns exec "$KP_NS" "$SOFTHCA" exec --prefix "$KP_NS" -- "$@"
}

# One run of a pingpong (ibv_*: -g GID, -c to check the data) or a perftest tool (ib_*: -x
# GID) with ARGS through kp_exchange, the server on SIDE; the client's result line (a
# pingpong's "iters in", perftest's result row) in KP_RESULT, empty if it printed none.
#   kp_tool SIDE TOOL ARGS...
kp_tool() {
    local side=$1 tool=$2
    shift 2
    local flag=-g check=-c
    [[ "$tool" = ib_* ]] && flag=-x check=
    kp_exchange "$side" tcp "$tool -d @DEV@ $flag @GID@ -p @PORT@ $check $*" \
        "$tool -d @DEV@ $flag @GID@ -p @PORT@ $check $* @ADDR@"
    # shellcheck disable=SC2034 # read by the caller
    KP_RESULT=$(grep -E "iters in|^ *[0-9]+ +[0-9]+ " <<<"$KP_OUT" | tail -1) || true
}

# One exchange between a server and a client, each an unmodified program:
#   kp_exchange SIDE READY 'SERVER COMMAND' 'CLIENT COMMAND'
# SIDE is where the server runs (linux or softhca), the client runs on the other side.
# READY says when the server takes connections: tcp (its TCP port @PORT@ listens: perftest
# and the pingpongs) or cm (an rdma_cm id listens). In the commands @DEV@ and @GID@ are
# the device and its GID index on the side that runs it, @PORT@ a TCP port of this exchange,
# and @ADDR@ the server's address (the RDMA address for cm, its IPv6 one with KP_CM_IPV6
# set; the TCP side channel's for tcp).
# A server in the guest is stopped after KP_SERVER_TIMEOUT seconds (default 100), the
# other programs after 120 s (a guest program 10 s earlier, so that the guest's shell is
# free for the next command). KP_RUN_TIMEOUT=T bounds every program of the exchange at T
# seconds instead.
# Both must exit 0; fails the test otherwise (with KP_MAY_FAIL set, returns 1 instead).
# A run that failed only because perftest could not calibrate its clock (lib.sh) is run
# again. The client's output is left in KP_OUT, the server's in KP_SERVER_OUT.
kp_exchange() {
    perftest_attempts kp_exchange_once "$@" && return 0
    [ -n "${KP_MAY_FAIL:-}" ] || fail "$KP_WHAT"
    echo "$KP_WHAT" >&2
    return 1
}

# One try of kp_exchange: returns 1 with the story in KP_WHAT when either side failed.
kp_exchange_once() {
    local side=$1 ready=$2 server_cmd=$3 client_cmd=$4
    KP_PORT=$((${KP_PORT:-18600} + 1))
    local addr
    if [ "$side" = linux ]; then
        addr=$KP_GUEST_ADDR
        [ "$ready" = cm ] && [ -n "${KP_CM_IPV6:-}" ] && addr=$KP_GUEST_ADDR6
    elif [ "$ready" = cm ]; then
        addr=$KP_SOFTHCA_ADDR
        [ -n "${KP_CM_IPV6:-}" ] && addr=$KP_SOFTHCA_ADDR6
    else
        addr=$KP_BRIDGE_ADDR
    fi
    local on_guest="s/@DEV@/rxe0/g; s/@GID@/$KP_GUEST_GID/g; s/@PORT@/$KP_PORT/g; s/@ADDR@/$addr/g"
    local on_softhca="s/@DEV@/$KP_DEV/g; s/@GID@/${KP_SOFTHCA_GID:-0}/g; s/@PORT@/$KP_PORT/g; s/@ADDR@/$addr/g"
    local rc=0 server_rc=0 server_out
    local bound=${KP_RUN_TIMEOUT:-120} guest_bound=${KP_RUN_TIMEOUT:-110}
    if [ "$side" = linux ]; then
        local check
        if [ "$ready" = cm ]; then
            check="rdma res show cm_id | grep -q LISTEN"
        else
            check=$(kp_tcp_listening "$KP_PORT")
        fi
        # A server whose client failed may wait for it forever: it is bounded.
        kp_guest_server "timeout ${KP_RUN_TIMEOUT:-${KP_SERVER_TIMEOUT:-100}} $(sed "$on_guest" <<<"$server_cmd")" "$check"
        # shellcheck disable=SC2046 # the command's words
        KP_OUT=$(kp_on_softhca timeout "$bound" $(sed "$on_softhca" <<<"$client_cmd") 2>&1) || rc=$?
        server_out=$(kp_guest_wait "$KP_JOB" 120) || server_rc=$?
    else
        local server_file
        server_file=$(mktemp)
        # shellcheck disable=SC2046
        kp_on_softhca timeout "$bound" $(sed "$on_softhca" <<<"$server_cmd") >"$server_file" 2>&1 &
        local server=$!
        if [ "$ready" = cm ]; then
            wait_until "kp_softhca_status | grep -q 'listening [1-9]'" 20
        else
            SERVER_NS=$KP_NS wait_listening "$KP_PORT"
        fi || fail "server did not get ready: $server_cmd: $(cat "$server_file")"
        KP_OUT=$(kp_guest $((guest_bound + 10)) "timeout $guest_bound $(sed "$on_guest" <<<"$client_cmd")") || rc=$?
        wait "$server" || server_rc=$?
        server_out=$(cat "$server_file")
        rm -f "$server_file"
    fi
    KP_SERVER_OUT=$server_out
    PERFTEST_OUTPUT="$KP_OUT $server_out"
    [ "$rc" -eq 0 ] && [ "$server_rc" -eq 0 ] && return 0
    KP_WHAT="$side as server: $server_cmd / $client_cmd"$'\n'"client ($rc): $KP_OUT"$'\n'"server ($server_rc): $server_out"
    return 1
}

# Every packet the kernel sent had a valid ICRC and parsed (prints the port's counters).
kp_check_received() {
    local counters
    counters=$(kp_softhca_status | grep -m1 "counters:")
    echo "$counters"
    grep -q "rx_bad_icrc 0 rx_malformed 0" <<<"$counters" || fail "bad packets from the kernel peer"
}

kp_softhca_status() {
    ip netns exec "$KP_NS" "$SOFTHCA" status --prefix "$KP_NS"
}

kp_down_quiet() {
    ip netns exec "$KP_NS" "$SOFTHCA" down --prefix "$KP_NS" >/dev/null 2>&1 || true
    ip netns del "$KP_NS" 2>/dev/null || true
}

kp_down() {
    if [ -n "${KP_FD:-}" ]; then
        printf 'exit\n' >&"$KP_FD" 2>/dev/null || true
        exec {KP_FD}>&-
        KP_FD=
    fi
    if [ -n "${KP_QEMU:-}" ]; then
        local i
        for i in $(seq 50); do kill -0 "$KP_QEMU" 2>/dev/null || break; sleep 0.1; done
        kill "$KP_QEMU" 2>/dev/null || true
        wait "$KP_QEMU" 2>/dev/null || true
        KP_QEMU=
    fi
    kp_down_quiet
    [ -n "${KP_DIR:-}" ] && rm -rf "$KP_DIR"
    KP_DIR=
}
