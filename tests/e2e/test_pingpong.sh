#!/usr/bin/env bash
# An ibverbs-utils pingpong (ibv_rc_pingpong, ibv_uc_pingpong, ibv_ud_pingpong,
# ibv_srq_pingpong, ibv_xsrq_pingpong), unmodified, between the two devices of an
# instance, at each message size given: every exchange is checked by the tool (the
# first four validate the received buffer pattern with -c; ibv_xsrq_pingpong has no such
# option, its -c is a client count, and says "success" when every test completed).
#   test_pingpong.sh TOOL SIZE... [-- EXTRA ARGS]   (PINGPONG_SIZES overrides the sizes;
#   GID_INDEX picks the GID, 0 by default: the IPv4 one)
source "$(dirname "$0")/lib.sh"
tool=${1:?pingpong tool}
shift
sizes=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    sizes+=("$1")
    shift
done
[ "${1:-}" = "--" ] && shift
[ -n "${PINGPONG_SIZES:-}" ] && read -r -a sizes <<<"$PINGPONG_SIZES"
server_out=$(mktemp)
trap 'kill ${server:-} 2>/dev/null || true; rm -f "$server_out"' EXIT
check=(-c)
[ "$tool" = ibv_xsrq_pingpong ] && check=()
for size in "${sizes[@]}"; do
    iters=200
    [ "$size" -ge 1048576 ] && iters=20
    done_line="$iters iters in"
    [ "$tool" = ibv_xsrq_pingpong ] && done_line=success
    port=$(free_port) # nothing else listens there (lib.sh): tests run side by side
    on_server timeout 60 "$tool" -d "$SERVER_DEV" -g "${GID_INDEX:-0}" -p "$port" -s "$size" \
        -n "$iters" "${check[@]}" "$@" >"$server_out" 2>&1 &
    server=$!
    wait_listening "$port" || fail "server did not start at size $size: $(cat "$server_out")"
    client_rc=0
    out=$(on_client timeout 60 "$tool" -d "$CLIENT_DEV" -g "${GID_INDEX:-0}" -p "$port" \
        -s "$size" -n "$iters" "${check[@]}" "$@" "$SERVER_ADDR" 2>&1) || client_rc=$?
    server_rc=0
    wait "$server" || server_rc=$?
    server_text=$(cat "$server_out")
    if [ "$client_rc" -ne 0 ] || [ "$server_rc" -ne 0 ]; then
        # Under injected loss (PINGPONG_LOSSY=1) one failure is the tools' own race, not
        # ours: the side that finishes first has checked every message it got and exits,
        # destroying its QP; if the other side's last send then loses its ACK, its retries
        # meet no QP and end in RETRY_EXC_ERR (as on any HCA). That is accepted when the
        # other side succeeded, which proves every message arrived and checked out.
        lost_last_ack() { grep -q "transport retry counter exceeded" <<<"$1"; }
        if [ -n "${PINGPONG_LOSSY:-}" ] &&
            { { [ "$client_rc" -eq 0 ] && lost_last_ack "$server_text"; } ||
                { [ "$server_rc" -eq 0 ] && lost_last_ack "$out"; }; }; then
            echo "size $size: one side's last ACK was lost after the other finished"
            [ "$client_rc" -eq 0 ] || out=$server_text # the result line is the server's
        else
            fail "failed at size $size: client: $out"$'\n'"server: $server_text"
        fi
    fi
    echo "$tool size $size: $(tail -1 <<<"$out")"
    grep -q "$done_line" <<<"$out" || fail "no result line at size $size"
done
echo PASS
