#!/usr/bin/env bash
# UD multicast between processes: a receiver on SERVER_DEV joins two QPs to
# 239.1.1.7, a sender on CLIENT_DEV sends 200 datagrams to the group; both QPs must
# get every one, whole. Over the built-in wire, and (from test_two_namespaces.sh)
# between two namespaces over af_packet on veth.
#   test_multicast.sh MCAST_PEER
source "$(dirname "$0")/lib.sh"
peer=${1:?path to mcast_peer}
ready=$(mktemp -u)
out=$(mktemp)
trap 'kill ${receiver:-} 2>/dev/null || true; rm -f "$ready" "$out"' EXIT
on_server timeout 60 "$peer" receive "$SERVER_DEV" 239.1.1.7 200 "$ready" >"$out" 2>&1 &
receiver=$!
for _ in $(seq 100); do
    [ -e "$ready" ] && break
    sleep 0.1
done
[ -e "$ready" ] || fail "receiver did not join: $(cat "$out")"
on_client timeout 60 "$peer" send "$CLIENT_DEV" 239.1.1.7 200 || fail "sender failed"
wait "$receiver" || fail "receiver: $(cat "$out")"
cat "$out"
echo PASS
