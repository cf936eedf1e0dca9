#!/usr/bin/env bash
# Single copy (docs/memory-model.md) is granted only between processes of one user: an
# RDMA WRITE and READ from root into an unprivileged user's process, and from that user
# into root's, go the engine's way (nothing placed, every byte right), while the user's
# own two processes, and root's own two, copy themselves. A grant names a PID: it is
# never given across users, whatever the requester's capabilities.
# An engine of its own: the counters it reads are its devices' alone.
source "$(dirname "$0")/../e2e/lib.sh"
as_nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups)
trap '"$SOFTHCA" down >/dev/null 2>&1 || true' EXIT
"$SOFTHCA" up >/dev/null || fail "softhca up failed"
server_dev=${SOFTHCA_PREFIX}0
client_dev=${SOFTHCA_PREFIX}1
placed() { # the client device's hw_counters/placed_bytes, after the engine's next publication
    sleep 0.1
    "$SOFTHCA" exec -- cat "/sys/class/infiniband/$client_dev/ports/1/hw_counters/placed_bytes"
}
# run TOOL SERVER-USER CLIENT-USER: 200 x 64 KiB, the client initiating; prints the
# bytes the client's device placed meanwhile.
run() {
    local tool=$1 server_user=$2 client_user=$3 port=$((18900 + RANDOM % 90)) rc=0 before
    local -a server_as=() client_as=()
    [ "$server_user" = nobody ] && server_as=("${as_nobody[@]}")
    [ "$client_user" = nobody ] && client_as=("${as_nobody[@]}")
    before=$(placed)
    "${server_as[@]}" "$SOFTHCA" exec -- timeout 60 "$tool" -d "$server_dev" -x 0 -p "$port" \
        -s 65536 -n 200 >/dev/null 2>&1 &
    local server_pid=$!
    wait_listening "$port" || fail "$tool's server did not listen"
    "${client_as[@]}" "$SOFTHCA" exec -- timeout 60 "$tool" -d "$client_dev" -x 0 -p "$port" \
        -s 65536 -n 200 127.0.0.1 >/dev/null 2>&1 || rc=$?
    wait "$server_pid" || rc=$?
    [ "$rc" -eq 0 ] || fail "$tool from $client_user to $server_user failed ($rc)"
    echo $(($(placed) - before))
}
for tool in ib_write_bw ib_read_bw; do
    for pair in "root root" "nobody nobody" "root nobody" "nobody root"; do
        set -- $pair
        moved=$(run "$tool" "$1" "$2")
        echo "$tool, server $1, client $2: $moved bytes placed by the client"
        if [ "$1" = "$2" ]; then
            [ "$moved" -ge $((200 * 65536)) ] || fail "$tool between two $1 processes placed $moved bytes"
        else
            [ "$moved" -eq 0 ] || fail "$tool from $2 into $1 placed $moved bytes across users"
        fi
    done
done
echo PASS
