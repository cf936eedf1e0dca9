#!/usr/bin/env bash
# librdmacm between softhca and the Linux kernel's rdma_cm (Soft-RoCE in a QEMU guest,
# kernel_peer.sh), with Linux as the server and then with softhca as the server: the
# IB CM on the wire (REQ/REP/RTU, DREQ/DREP; SIDR for UD) between softhca's engine and the
# kernel's cm.ko. rping with every ping verified, ucmatose with several connections,
# udaddy, rdma_server/rdma_client, perftest -R over RC and UD; then a connect to a port
# nobody listens on, each way, ends in REJECTED.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/kernel_peer.sh"
trap kp_down EXIT
kp_up "$SOFTHCA_PREFIX" "${KP_SUBNET:-9}"

for side in linux softhca; do
    kp_exchange "$side" cm "rping -s -a @ADDR@ -V -C 20 -S 4000" "rping -c -a @ADDR@ -V -C 20 -S 4000"
    echo "rping ($side server): 20 pings verified"
    kp_exchange "$side" cm "ucmatose -b @ADDR@ -c 4 -C 10" "ucmatose -s @ADDR@ -c 4 -C 10"
    grep -q "test complete" <<<"$KP_OUT" || fail "ucmatose ($side server): $KP_OUT"
    echo "ucmatose ($side server): 4 connections, 10 messages each"
    kp_exchange "$side" cm "udaddy -b @ADDR@ -c 2" "udaddy -s @ADDR@ -c 2"
    grep -q "test complete" <<<"$KP_OUT" || fail "udaddy ($side server): $KP_OUT"
    echo "udaddy ($side server): SIDR and UD messages"
    kp_exchange "$side" cm "rdma_server -s @ADDR@" "rdma_client -s @ADDR@"
    echo "rdma_server/rdma_client ($side server)"
    for run in "ib_send_bw -s 65536" "ib_write_bw -s 65536" "ib_read_lat -s 4096" "ib_send_bw -c UD -s 1024"; do
        # perftest -R's listener race (lib.sh) is run again by kp_exchange.
        KP_SERVER_TIMEOUT=30 kp_exchange "$side" cm "$run -d @DEV@ -R -n 100" \
            "$run -d @DEV@ -R -n 100 @ADDR@"
        row=$(grep -E "^ +[0-9]+ +[0-9]+ +[0-9.]+" <<<"$KP_OUT" | tail -1) ||
            fail "$run -R ($side server): no result row: $KP_OUT"
        echo "$run -R ($side server):$row"
    done
done

# Nobody listens on port 7999: the kernel answers softhca's REQ with a REJ and the other way.
out=$(kp_on_softhca timeout 30 rping -c -a "$KP_GUEST_ADDR" -p 7999 -C 1 2>&1) &&
    fail "rping to a closed port on Linux succeeded"
grep -q "REJECTED" <<<"$out" || fail "softhca's rping to a closed port: $out"
out=$(kp_guest 30 "rping -c -a $KP_SOFTHCA_ADDR -p 7999 -C 1") &&
    fail "rping to a closed port on softhca succeeded"
grep -q "REJECTED" <<<"$out" || fail "Linux's rping to a closed port on softhca: $out"
echo "no listener: REJECTED both ways"
kp_softhca_status | grep -E "^rdma_cm:"
echo PASS
