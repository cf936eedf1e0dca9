#!/usr/bin/env bash
# softhca's own packets, captured from its ports (softhca up --pcap), pass the same
# codec checks as the Linux Soft-RoCE reference captures: they parse, their ICRCs are
# right, and their headers re-encode byte for byte. The traffic covers WRITE, READ,
# SEND and both atomics. ibv_rc_pingpong and ibv_ud_pingpong give their address vectors
# hop limit 1: on the wire is the route's hop limit (the namespace's ip_default_ttl), as
# the kernel resolves it; and each connection has a UDP source port of its own. The
# pingpongs and an ib_write_bw run again over the link-local IPv6 GID (index 1).
source "$(dirname "$0")/lib.sh"
PCAP_CHECK=${1:?path to pcap_check}
dir=$(mktemp -d)
trap '"$SOFTHCA" down >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
"$SOFTHCA" up --pcap "$dir/capture" >/dev/null || fail "softhca up --pcap failed"
for tool in ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw; do
    port=$(free_port)
    extra=(-s 5000)
    [ "$tool" = ib_atomic_bw ] && extra=(-A CMP_AND_SWAP)
    on_server timeout 60 "$tool" -d "$SERVER_DEV" -x 0 -p "$port" -n 50 "${extra[@]}" \
        >/dev/null 2>&1 &
    server=$!
    wait_listening "$port" || fail "$tool server did not start"
    on_client timeout 60 "$tool" -d "$CLIENT_DEV" -x 0 -p "$port" -n 50 "${extra[@]}" \
        "$SERVER_ADDR" >/dev/null 2>&1 || fail "$tool failed"
    wait "$server" || fail "$tool server failed"
done
port=$(free_port)
on_server timeout 60 ib_atomic_bw -d "$SERVER_DEV" -x 0 -p "$port" -n 50 >/dev/null 2>&1 &
server=$!
wait_listening "$port" || fail "ib_atomic_bw server did not start"
on_client timeout 60 ib_atomic_bw -d "$CLIENT_DEV" -x 0 -p "$port" -n 50 "$SERVER_ADDR" \
    >/dev/null 2>&1 || fail "ib_atomic_bw (fetch and add) failed"
wait "$server"
# GID 0 is IPv4, GID 1 the link-local IPv6 address: the same tools over IPv6 too.
for gid in 0 1; do
    for tool in ibv_rc_pingpong ibv_ud_pingpong; do
        port=$(free_port)
        on_server timeout 60 "$tool" -d "$SERVER_DEV" -g "$gid" -p "$port" -n 20 -s 512 \
            >/dev/null 2>&1 &
        server=$!
        wait_listening "$port" || fail "$tool server did not start"
        on_client timeout 60 "$tool" -d "$CLIENT_DEV" -g "$gid" -p "$port" -n 20 -s 512 \
            "$SERVER_ADDR" >/dev/null 2>&1 || fail "$tool -g $gid failed"
        wait "$server" || fail "$tool server failed"
    done
done
port=$(free_port)
on_server timeout 60 ib_write_bw -d "$SERVER_DEV" -x 1 -p "$port" -n 50 -s 5000 >/dev/null 2>&1 &
server=$!
wait_listening "$port" || fail "ib_write_bw server did not start"
on_client timeout 60 ib_write_bw -d "$CLIENT_DEV" -x 1 -p "$port" -n 50 -s 5000 "$SERVER_ADDR" \
    >/dev/null 2>&1 || fail "ib_write_bw -x 1 (IPv6) failed"
wait "$server" || fail "ib_write_bw server failed"
"$SOFTHCA" down >/dev/null # flushes the captures
ttl=$(cat /proc/sys/net/ipv4/ip_default_ttl)
# Eight RC connections (six perftest runs, two pingpongs) and two UD pairs: nine ports at
# least. The IPv6 runs (two pingpongs of 20 exchanges, 50 WRITEs of 2 packets): 200 and more.
"$PCAP_CHECK" --ttl "$ttl" --min-source-ports 9 --min-ipv6 200 "$dir"/capture-*.pcap ||
    fail "own packets failed the codec checks"
echo PASS
