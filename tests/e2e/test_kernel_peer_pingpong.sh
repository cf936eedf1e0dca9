#!/usr/bin/env bash
# softhca against the Linux kernel's RDMA stack (Soft-RoCE in a QEMU guest, kernel_peer.sh):
# ibv_rc_pingpong, ibv_uc_pingpong, ibv_ud_pingpong and ibv_srq_pingpong, unmodified, with
# Linux as the server and then with softhca as the server, from 1 B to 64 KiB (UC at
# 4 KiB, UD up to the path MTU of 1024 the guest's link gives). Every exchange is checked
# by the tools (-c validates the received buffer pattern) on both sides.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/kernel_peer.sh"
trap kp_down EXIT
kp_up "$SOFTHCA_PREFIX" "${KP_SUBNET:-7}"

# One exchange: TOOL with ARGS, the server on SIDE (linux or softhca).
pingpong() {
    local side=$1 tool=$2
    shift 2
    kp_exchange "$side" tcp "$tool -d @DEV@ -g @GID@ -p @PORT@ -c $*" \
        "$tool -d @DEV@ -g @GID@ -p @PORT@ -c $* @ADDR@"
    grep -q "iters in" <<<"$KP_OUT" || fail "$tool $*: no result line: $KP_OUT"
    echo "$tool $* ($side server): $(tail -1 <<<"$KP_OUT")"
}

for side in linux softhca; do
    for size in 1 4096 65536; do
        pingpong "$side" ibv_rc_pingpong -s "$size" -n 100
    done
    # UC has no retransmission: a packet the emulated guest drops loses its message, and
    # a ping-pong then waits for ever (perftest's UC latency tools did, at 64 KiB; this
    # script hung once too). So UC's ping-pong takes 4 packets a message; its 64 KiB
    # messages are the perftest script's, whose write_bw server does not wait for them.
    pingpong "$side" ibv_uc_pingpong -s 4096 -n 100
    for size in 1 512 1024; do
        pingpong "$side" ibv_ud_pingpong -s "$size" -n 100
    done
    pingpong "$side" ibv_srq_pingpong -s 4096 -n 100
    pingpong "$side" ibv_srq_pingpong -s 65536 -n 50
done
kp_check_received
echo PASS
