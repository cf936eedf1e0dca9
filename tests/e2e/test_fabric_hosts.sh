#!/usr/bin/env bash
# A fabric's hosts in network namespaces of their own (softhca up --fabric ...,netns=1):
# each host's namespace holds its NICs' addresses; `softhca exec --host NAME` runs a program
# there that sees only that host's devices, and whose /sys shows that namespace's
# interfaces. perftest between hosts without -d, its connection data over the management
# network's TCP and its RDMA across the fabric; rdma_cm per namespace, as the kernel keeps
# it: two rping servers on one port on two hosts, each reached from another host over its own
# device, and an address of another host refused, also to the engine's own namespace, which
# hears no host's connections; a rail host with two NICs; errors for a
# host that does not exist, an engine without namespaces, a user who is not root; a switch
# taken down and up whole; and
# `softhca down` after the engine was killed removing every namespace.
source "$(dirname "$0")/lib.sh"
P=$SOFTHCA_PREFIX
trap '"$SOFTHCA" down >/dev/null 2>&1 || true; rm -f "${server_out:-}" "${other_out:-}"' EXIT
server_out=$(mktemp)
other_out=$(mktemp)

namespaces() { ip netns list | awk -v p="$P-" 'index($1, p) == 1 {print $1}' | sort | tr '\n' ' '; }
on_host() { # on_host HOST CMD...: CMD on a host of the fabric
    local host=$1
    shift
    "$SOFTHCA" exec --host "$host" -- "$@"
}
# The MADs (rdma_cm's CM messages) device $1 received.
rx_mads() {
    "$SOFTHCA" status --json | python3 -c '
import json, sys
for d in json.load(sys.stdin)["devices"]:
    if d["name"] == sys.argv[1]:
        print(d["counters"]["rx_mads"])' "$P$1"
}

"$SOFTHCA" up --fabric leaf-spine:hosts=4,leaves=2,spines=1,rate_gbps=10,netns=1 >/dev/null ||
    fail "softhca up --fabric ...,netns=1 failed"
[ "$(namespaces)" = "$P-fabric $P-h0 $P-h1 $P-h2 $P-h3 " ] ||
    fail "the namespaces are not the hosts' and the fabric's: $(namespaces)"
"$SOFTHCA" status --json | python3 -c '
import json, sys
f = json.load(sys.stdin)["fabric"]
assert f["namespaces"] == [sys.argv[1] + "-h%d" % i for i in range(4)], f["namespaces"]
' "$P" || fail "the status does not name the hosts' namespaces"
grep -q "hosts' network namespaces: $P-h0 $P-h1 $P-h2 $P-h3" <<<"$("$SOFTHCA" status)" ||
    fail "the text status does not name the namespaces"

# What a program on h2 sees: its device only, its address on eth0, its /sys.
devices=$(on_host h2 ibv_devices | awk 'NR > 2 {print $1}' | tr '\n' ' ')
[ "$devices" = "${P}2 " ] || fail "h2 sees the devices '$devices', not ${P}2 alone"
addresses=$(on_host h2 ip -br addr show eth0)
grep -q "198.19.0.3/16" <<<"$addresses" && grep -q "2001:2:0:fab::3/64" <<<"$addresses" ||
    fail "h2's eth0 does not hold its addresses: $addresses"
on_host h2 test -e /sys/class/net/eth0 || fail "h2's /sys does not show its eth0"
# eth0 is the port's netdev: its MTU, and its MAC, so its link-local address is GID 1's.
link=$(on_host h2 ip -o link show eth0)
grep -q "mtu 4200 " <<<"$link" && grep -q "link/ether 02:53:46:42:00:02 " <<<"$link" ||
    fail "h2's eth0 has not the port's MTU and MAC: $link"
on_host h2 ip -br addr show eth0 | grep -q "fe80::53:46ff:fe42:2/64" ||
    fail "h2's link-local address is not its GID 1"
[ "$(on_host h2 cat "/sys/class/infiniband/${P}2/ports/1/gid_attrs/ndevs/0")" = eth0 ] ||
    fail "h2's GID 0 is not on eth0"
on_host h2 ibv_devinfo -v | grep -q "GID\[  0\]:.*198.19.0.3, RoCE v2" ||
    fail "ibv_devinfo on h2: $(on_host h2 ibv_devinfo -v 2>&1 | grep GID)"

# perftest without -d: each host's one device. The connection data goes over TCP between
# the namespaces; the RDMA crosses leaf0 -> spine0 -> leaf1.
exchange_once() { # exchange_once SERVER_HOST CLIENT_HOST ADDRESS TOOL ARGS...
    local server=$1 client=$2 address=$3 tool=$4 port rc=0
    shift 4
    SERVER_NS=$P-$server
    port=$(free_port)
    on_host "$server" timeout 120 "$tool" -p "$port" "$@" >"$server_out" 2>&1 &
    local pid=$!
    if [[ " $* " = *" -R "* ]]; then # it listens on rdma_cm, not TCP
        wait_until "\"$SOFTHCA\" status | grep -q 'rdma_cm:.* listening [1-9]'" 20
    else
        wait_listening "$port"
    fi || fail "$tool server on $server did not start: $(cat "$server_out")"
    out=$(on_host "$client" timeout 120 "$tool" -p "$port" "$@" "$address" 2>&1) || rc=$?
    wait "$pid" || rc=$((rc ? rc : 100))
    PERFTEST_OUTPUT="$out $(cat "$server_out")"
    unset SERVER_NS
    return "$rc"
}
exchange() {
    perftest_attempts exchange_once "$@" ||
        fail "$4 ${*:5} from $2 to $1: $out"$'\n'"server: $(cat "$server_out")"
}
exchange h3 h0 198.19.0.4 ib_write_bw -x 0 -s 65536 -n 2000
echo "ib_write_bw h0 -> h3: $(grep -E '^ +65536' <<<"$out")"
"$SOFTHCA" status --json | python3 -c '
import json, sys
e = {(x["from"], x["to"]): x["frames"] for x in json.load(sys.stdin)["fabric"]["egress"]}
assert e[("h0", "leaf0")] >= 2000 and e[("spine0", "leaf1")] >= 2000 and e[("leaf1", "h3")] >= 2000, e
assert e[("h1", "leaf0")] == 0 and e[("h2", "leaf1")] == 0, e
' || fail "ib_write_bw's frames did not go h0 -> leaf0 -> spine0 -> leaf1 -> h3"
exchange h2 h1 198.19.0.3 ibv_rc_pingpong -g 0 -c -s 65536 -n 200

# rdma_cm per namespace: a wildcard listener on the same port on h3 and on h2, each reached
# from another host; the connection leaves from the client's host's device, so each of the
# four devices receives CM messages.
# How many rdma_cm IDs listen in the engine.
cm_listening() {
    "$SOFTHCA" status --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["rdma_cm"]["listening"])'
}
for d in 0 1 2 3; do eval "mads$d=$(rx_mads $d)"; done
on_host h3 timeout 60 rping -s -a 0.0.0.0 -p 7471 -C 20 -V >"$server_out" 2>&1 &
s3=$!
on_host h2 timeout 60 rping -s -a 0.0.0.0 -p 7471 -C 20 -V >"$other_out" 2>&1 &
s2=$!
wait_until '[ "$(cm_listening)" -ge 2 ]' 30 ||
    fail "the rping servers did not listen: $(cat "$server_out" "$other_out")"
on_host h0 timeout 60 rping -c -a 198.19.0.4 -p 7471 -C 20 -V >/dev/null 2>&1 ||
    fail "rping h0 -> h3 failed: $(cat "$server_out")"
on_host h1 timeout 60 rping -c -a 198.19.0.3 -p 7471 -C 20 -V >/dev/null 2>&1 ||
    fail "rping h1 -> h2 failed: $(cat "$other_out")"
wait "$s3" || fail "rping's server on h3 failed: $(cat "$server_out")"
wait "$s2" || fail "rping's server on h2 failed: $(cat "$other_out")"
for d in 0 1 2 3; do
    before=$(eval "echo \$mads$d")
    [ "$(rx_mads $d)" -gt "$before" ] || fail "${P}$d received no CM message: not its host's connection"
done
# An address of another host is not this namespace's (EADDRNOTAVAIL, as the kernel says).
out=$(on_host h3 timeout 20 rping -s -a 198.19.0.1 -p 7472 -C 1 2>&1) &&
    fail "rping on h3 bound h0's address"
grep -q "Cannot assign requested address" <<<"$out" || fail "binding h0's address on h3: $out"
# The engine's own namespace has none of the hosts' interfaces: a program there can neither
# bind a host's address nor hear a host's connections (a listener on every address of its
# namespace, on a port no host listens on).
out=$("$SOFTHCA" exec -- timeout 20 rping -s -a 198.19.0.2 -p 7473 -C 1 2>&1) &&
    fail "rping in the engine's namespace bound h1's address"
grep -q "Cannot assign requested address" <<<"$out" || fail "binding h1's address outside h1: $out"
"$SOFTHCA" exec -- timeout 30 rping -s -a 0.0.0.0 -p 7474 -C 1 -v >"$other_out" 2>&1 &
squatter=$!
wait_until '[ "$(cm_listening)" -ge 1 ]' 30 || fail "the rping server did not listen: $(cat "$other_out")"
on_host h0 timeout 20 rping -c -a 198.19.0.4 -p 7474 -C 1 >/dev/null 2>&1 &&
    fail "h0 reached a listener of the engine's namespace at h3's address"
kill "$squatter" 2>/dev/null || true
wait "$squatter" 2>/dev/null || true
! grep -q "ping data" "$other_out" || fail "the engine's namespace heard h0's connection: $(cat "$other_out")"
# perftest over rdma_cm (-R) between hosts.
exchange h1 h3 198.19.0.2 ib_send_bw -R -x 0 -s 4096 -n 1000

# A switch down takes every link of it down at once, and up brings them back; the hosts
# across it talk again.
links_up() { # links_up SWITCH: "up" flags of the links from and to it, then of the rest
    "$SOFTHCA" status --json | python3 -c '
import json, sys
e = json.load(sys.stdin)["fabric"]["egress"]
on = sorted({x["up"] for x in e if sys.argv[1] in (x["from"], x["to"])})
off = sorted({x["up"] for x in e if sys.argv[1] not in (x["from"], x["to"])})
print(on, off)' "$1"
}
"$SOFTHCA" fabric switch spine0 down >/dev/null || fail "softhca fabric switch spine0 down"
[ "$(links_up spine0)" = "[False] [True]" ] || fail "spine0 down: $(links_up spine0)"
"$SOFTHCA" fabric switch spine0 up >/dev/null || fail "softhca fabric switch spine0 up"
[ "$(links_up spine0)" = "[True] [True]" ] || fail "spine0 up: $(links_up spine0)"
exchange h3 h0 198.19.0.4 ibv_rc_pingpong -g 0 -c -s 4096 -n 100
out=$("$SOFTHCA" fabric switch h0 down 2>&1) && fail "fabric switch h0 (a host) went down"
grep -q "no such switch" <<<"$out" || fail "fabric switch h0: $out"

# Errors: no such host, or a name that is not one; a prefix that is not one; a user who is
# not root (entering a namespace takes CAP_SYS_ADMIN).
out=$("$SOFTHCA" exec --host h9 -- true 2>&1) && fail "exec --host h9 ran"
grep -q "has no host h9 in a network namespace of its own" <<<"$out" || fail "exec --host h9: $out"
"$SOFTHCA" exec --host .. -- true >/dev/null 2>&1 && fail "exec --host .. ran"
out=$("$SOFTHCA" status --prefix .. 2>&1) && fail "status --prefix .. ran"
grep -q "the prefix must be" <<<"$out" || fail "status --prefix ..: $out"
out=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$SOFTHCA" exec --host h0 -- true 2>&1) &&
    fail "a user who is not root entered h0's namespace"
grep -q "it takes root" <<<"$out" || fail "exec --host as nobody: $out"

# Killed, the engine leaves its namespaces; `softhca down` removes them.
kill -9 "$(engine_pid)"
sleep 0.5
[ -n "$(namespaces)" ] || fail "the namespaces went with the engine's death (they are mounted)"
"$SOFTHCA" down >/dev/null || fail "softhca down after the engine was killed"
[ -z "$(namespaces)" ] || fail "softhca down left namespaces: $(namespaces)"

# A rail host: NIC n on eth<n>, both devices in its view. And exec --host on an engine
# without namespaces.
"$SOFTHCA" up --fabric rail:hosts=2,rails=2,netns=1 >/dev/null || fail "softhca up --fabric rail:...,netns=1"
devices=$(on_host h1 ibv_devices | awk 'NR > 2 {print $1}' | sort | tr '\n' ' ')
[ "$devices" = "${P}2 ${P}3 " ] || fail "rail host h1 sees '$devices'"
[ "$(on_host h1 cat "/sys/class/infiniband/${P}3/ports/1/gid_attrs/ndevs/0")" = eth1 ] ||
    fail "h1's NIC 1 is not on eth1"
on_host h1 ip -br addr show eth1 | grep -q "198.19.0.4/16" || fail "h1's eth1 does not hold 198.19.0.4"
"$SOFTHCA" down >/dev/null
[ -z "$(namespaces)" ] || fail "softhca down left namespaces: $(namespaces)"
"$SOFTHCA" up --fabric leaf-spine:hosts=2,leaves=1,spines=1 >/dev/null
out=$("$SOFTHCA" exec --host h0 -- true 2>&1) && fail "exec --host without netns=1 ran"
grep -q "netns=1" <<<"$out" || fail "exec --host without namespaces: $out"
echo "hosts in namespaces: devices, addresses, perftest, rdma_cm, rail hosts, cleanup: ok"
