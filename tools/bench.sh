#!/usr/bin/env bash
# Benchmark: softhca (perftest between the two built-in devices) side by side with
# what a user would otherwise use on the same machine, TCP over loopback (qperf), in
# one run, with the ratio. Not a test: machines here are shared and noisy, so read the
# figures as a comparison made under the same conditions, not as absolutes.
#
#   tools/bench.sh [-q] [PLOT.png]   # -q: fewer iterations (a quick look)
#
# Prints bandwidth (write/read/send at 8 B, 4 KiB, 64 KiB, 1 MiB, with application
# buffers from the heap, which the engine reaches with cross-memory attach, and with
# buffers in a shared file, which it maps), message rate of 8-byte writes with 1 and 16
# QPs, 64 KiB bandwidth with 16 QPs, and latency (send/write/read at 8 B and 4 KiB),
# each beside qperf's tcp_bw/tcp_lat and with its ratio to TCP; heap bandwidth and latency
# with one and two engine data-path threads (--threads); then 64 KiB bandwidth and
# 8-byte latency over each kind of port (ring, memif, af_packet on a veth, the kernel UDP
# socket port over loopback), two hosts over a veth (namespaces) at MTU 1500 and 9000 for
# af_packet, udp and af_xdp ports beside TCP over the same veth, and UCX's ucx_perftest over
# softhca beside UCX over TCP (applications). Writes a PNG plot of bandwidth against
# message size (default build/bench.png). First the machine's limits, measured in the same
# run by softhca-limits-probe: memcpy, one memory-file and one cross-memory-attach call at
# 64 KiB and 1 MiB, and the one-way latency of a message relayed through a third process.
# Needs a build (tools/build.sh) and root; installs qperf and gnuplot if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
softhca=build/tools/softhca
prefix=shbench
iters=2000
if [ "${1:-}" = "-q" ]; then
    iters=300
    shift
fi
plot=${1:-build/bench.png}
for tool in qperf gnuplot; do
    command -v "$tool" >/dev/null ||
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
            "$([ "$tool" = gnuplot ] && echo gnuplot-nox || echo qperf)" >/dev/null
done

work=$(mktemp -d)
shm_file=/dev/shm/softhca-bench-$$
cleanup() {
    [ -n "${qperf_pid:-}" ] && kill "$qperf_pid" 2>/dev/null || true
    "$softhca" down --prefix "$prefix" >/dev/null 2>&1 || true
    for p in shbma shbmb shbu; do "$softhca" down --prefix "$p" >/dev/null 2>&1 || true; done
    SOFTHCA=$softhca tools/netns-pair.sh down shbp >/dev/null 2>&1 || true
    ip netns del shbt-a 2>/dev/null || true
    ip netns del shbt-b 2>/dev/null || true
    rm -rf "$work" "$shm_file"
}
trap cleanup EXIT
"$softhca" up --prefix "$prefix" >/dev/null
qperf >/dev/null 2>&1 &
qperf_pid=$!
sleep 0.5
# A shared file for perftest --mmap (the engine maps such memory: no system call per
# access). Big enough for the largest message and both sides.
dd if=/dev/zero of="$shm_file" bs=1M count=8 status=none

# A TCP port nobody listens on, for a server to take.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# perftest between <prefix>0 (server) and <prefix>1 (client); prints the value of
# column $3 of the result row. Further arguments go to both sides.
perftest() {
    local tool=$1 size=$2 column=$3 port
    shift 3
    port=$(free_port)
    "$softhca" exec --prefix "$prefix" -- timeout 120 "$tool" -d "${prefix}0" -x 0 -p "$port" \
        -s "$size" -n "$iters" "$@" >/dev/null 2>&1 &
    local server=$!
    sleep 0.3
    "$softhca" exec --prefix "$prefix" -- timeout 120 "$tool" -d "${prefix}1" -x 0 -p "$port" \
        -s "$size" -n "$iters" "$@" 127.0.0.1 2>/dev/null |
        awk -v size="$size" -v col="$column" '$1 == size && NF >= col {print $col; exit}'
    wait "$server" 2>/dev/null || true
}

# qperf over loopback: "bw" in MB/s or "lat" in microseconds.
tcp() {
    local test=$1 size=$2
    # -uu prints plain units: bytes/sec and nanoseconds.
    qperf -t 2 --msg_size "$size" -uu 127.0.0.1 "$test" 2>/dev/null |
        awk '$1 == "bw" {printf "%.2f\n", $3 / 1e6; exit} $1 == "latency" {printf "%.2f\n", $3 / 1000; exit}'
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a != "" && b > 0) printf "%.2f", a / b; else print "-"}'; }

echo "softhca $(git rev-parse --short HEAD 2>/dev/null || echo '?') on $(nproc) cores, $(date -u +%F)"
# What the machine allows, in the same run: every figure below is read against these.
build/tools/softhca-limits-probe $([ "$iters" -lt 2000 ] && echo --quick) ||
    echo "softhca-limits-probe failed"
echo "Bandwidth, MB/s (softhca: perftest BW average; TCP: qperf tcp_bw over loopback)"
printf "%-9s %-6s %9s %9s %9s %9s %7s %7s %7s\n" size memory write read send tcp_bw \
    "w/tcp" "r/tcp" "s/tcp"
for size in 8 4096 65536 1048576; do
    t=$(tcp tcp_bw "$size")
    for memory in heap shared; do
        extra=()
        [ "$memory" = shared ] && extra=(--mmap="$shm_file")
        w=$(perftest ib_write_bw "$size" 4 "${extra[@]}")
        r=$(perftest ib_read_bw "$size" 4 "${extra[@]}")
        s=$(perftest ib_send_bw "$size" 4 "${extra[@]}")
        printf "%-9s %-6s %9s %9s %9s %9s %7s %7s %7s\n" "$size" "$memory" "$w" "$r" "$s" "$t" \
            "$(ratio "$w" "$t")" "$(ratio "$r" "$t")" "$(ratio "$s" "$t")"
        echo "$size $memory ${w:-0} ${r:-0} ${s:-0} ${t:-0}" >>"$work/bw.dat"
    done
done

echo "Message rate of 8-byte RDMA writes, M messages/s (perftest MsgRate), and 16 QPs at 64 KiB"
m1=$(perftest ib_write_bw 8 5)
m16=$(perftest ib_write_bw 8 5 -q 16)
b1=$(perftest ib_write_bw 65536 4)
b16=$(perftest ib_write_bw 65536 4 -q 16)
printf "%-30s %10s\n" "write 8 B, 1 QP (Mmsg/s)" "$m1" "write 8 B, 16 QPs (Mmsg/s)" "$m16" \
    "write 64 KiB, 1 QP (MB/s)" "$b1" "write 64 KiB, 16 QPs (MB/s)" "$b16"

echo "Latency, microseconds (softhca: perftest typical; TCP: qperf tcp_lat, one way)"
printf "%-9s %9s %9s %9s %9s %8s %8s %8s\n" size send write read tcp_lat \
    "tcp/s" "tcp/w" "tcp/r"
for size in 8 4096; do
    s=$(perftest ib_send_lat "$size" 5)
    w=$(perftest ib_write_lat "$size" 5)
    r=$(perftest ib_read_lat "$size" 5)
    t=$(tcp tcp_lat "$size")
    printf "%-9s %9s %9s %9s %9s %8s %8s %8s\n" "$size" "$s" "$w" "$r" "$t" \
        "$(ratio "$t" "$s")" "$(ratio "$t" "$w")" "$(ratio "$t" "$r")"
done

# Engine threads (--threads): heap bandwidth at 64 KiB and 1 MiB and 8-byte send latency
# with one data-path thread and with two (one per device: the sender's copy out of one
# process and the receiver's into the other on threads of their own), one after the other.
echo "Engine data-path threads: heap buffers, MB/s and 8 B send latency (us), $(nproc) cores"
printf "%-8s %11s %11s %11s %11s %11s %11s %9s\n" threads write_64K write_1M read_64K \
    read_1M send_64K send_1M lat_8B
for threads in 1 2; do
    "$softhca" down --prefix "$prefix" >/dev/null
    "$softhca" up --prefix "$prefix" --threads "$threads" >/dev/null
    row=()
    for tool in ib_write_bw ib_read_bw ib_send_bw; do
        for size in 65536 1048576; do
            row+=("$(perftest "$tool" "$size" 4)")
        done
    done
    printf "%-8s %11s %11s %11s %11s %11s %11s %9s\n" "$threads" "${row[@]}" \
        "$(perftest ib_send_lat 8 5)"
done
"$softhca" down --prefix "$prefix" >/dev/null
"$softhca" up --prefix "$prefix" >/dev/null

# Applications: UCX's ucx_perftest (UCP tag matching) over softhca's RC (rc_verbs, the
# server on <prefix>0, the client on <prefix>1) beside the same over UCX's own TCP
# transport on loopback, in the same run. Prints column COLUMN of the "Final:" row
# (7: overall bandwidth, MB/s; 5: overall latency, us).
#   ucx TLS DEVICE_SERVER DEVICE_CLIENT TEST SIZE COLUMN
ucx() {
    local tls=$1 dev_s=$2 dev_c=$3 test=$4 size=$5 column=$6 port
    port=$(free_port)
    local n=$((iters < 2000 ? 300 : 2000))
    "$softhca" exec --prefix "$prefix" -- env UCX_TLS="$tls" UCX_NET_DEVICES="$dev_s" \
        UCX_WARN_UNUSED_ENV_VARS=n timeout 120 ucx_perftest -p "$port" -t "$test" -s "$size" \
        -n "$n" >/dev/null 2>&1 &
    local server=$!
    sleep 0.5
    "$softhca" exec --prefix "$prefix" -- env UCX_TLS="$tls" UCX_NET_DEVICES="$dev_c" \
        UCX_WARN_UNUSED_ENV_VARS=n timeout 120 ucx_perftest 127.0.0.1 -p "$port" -t "$test" \
        -s "$size" -n "$n" 2>/dev/null |
        awk -v col="$column" '$1 == "Final:" && NF >= col {print $col; exit}'
    wait "$server" 2>/dev/null || true
}
echo "Applications: UCX ucx_perftest (tag matching) over softhca RC vs UCX over TCP on loopback"
printf "%-24s %10s %10s %7s\n" test softhca tcp ratio
for run in "tag_bw 65536 7" "tag_bw 1048576 7" "tag_lat 8 5"; do
    read -r test size column <<<"$run"
    v=$(ucx "rc_verbs,ud_verbs:aux" "${prefix}0:1" "${prefix}1:1" "$test" "$size" "$column")
    t=$(ucx tcp lo lo "$test" "$size" "$column")
    if [ "$test" = tag_lat ]; then
        printf "%-24s %10s %10s %7s\n" "$test $size B (us)" "$v" "$t" "$(ratio "$t" "$v")"
    else
        printf "%-24s %10s %10s %7s\n" "$test $size B (MB/s)" "$v" "$t" "$(ratio "$v" "$t")"
    fi
done

# Open MPI (softhca-mpi-bench: ping-pongs and a 1 MiB MPI_Allreduce, checked), two ranks.
# Prints "8 B latency, 1 MiB MB/s, allreduce us". MODE:
#   softhca     pml ucx over softhca's RC only (UCX's shared-memory transports off), one
#               rank on each device
#   tcp         ob1 over its TCP BTL on loopback (its shared-memory BTL off)
#   ucx         one host as users run it: pml ucx with every UCX transport (sm, cma and
#               softhca's rc_verbs among them; UCX picks)
#   vader       ob1 with its shared-memory BTL
#   ns_softhca  across the namespaces shbm-a and shbm-b (tools/netns-pair.sh, udp ports):
#               pml ucx over each namespace's engine; mpirun in shbm-a starts the other
#               rank through $work/netns-agent (the namespaces as two hosts)
#   ns_tcp      the same two "hosts", ob1 over TCP on the veth
mpi_apps=$PWD/build/tools/softhca-mpi-bench
mpi() {
    local n=$((iters < 2000 ? 200 : 1000))
    # Each rank's app context names UCX_TLS: mpirun's -x belongs to the context it is in.
    local quiet=(-x UCX_WARN_UNUSED_ENV_VARS=n) rc=(-x UCX_TLS=rc_verbs,ud_verbs:aux,self)
    local ucx=(-mca pml ucx -mca btl ^openib,uct -mca osc ^ucx)
    # Each "host" would bind its rank to its first core: both on one core here.
    local across=(--bind-to none -mca plm_rsh_agent "$work/netns-agent"
        --host 198.18.2.1:1,198.18.2.2:1 -mca oob_tcp_if_include 198.18.2.0/24)
    case $1 in
    softhca)
        "$softhca" exec --prefix "$prefix" -- timeout 180 mpirun --allow-run-as-root "${ucx[@]}" \
            -np 1 "${quiet[@]}" "${rc[@]}" -x UCX_NET_DEVICES="${prefix}0:1" "$mpi_apps" "$n" : \
            -np 1 "${quiet[@]}" "${rc[@]}" -x UCX_NET_DEVICES="${prefix}1:1" "$mpi_apps" "$n" ;;
    tcp)
        timeout 180 mpirun --allow-run-as-root -mca pml ob1 -mca btl tcp,self \
            -mca btl_tcp_if_include lo -np 2 "$mpi_apps" "$n" ;;
    ucx)
        "$softhca" exec --prefix "$prefix" -- timeout 180 mpirun --allow-run-as-root "${ucx[@]}" \
            -np 2 "${quiet[@]}" "$mpi_apps" "$n" ;;
    vader)
        timeout 180 mpirun --allow-run-as-root -mca pml ob1 -mca btl vader,self -np 2 \
            "$mpi_apps" "$n" ;;
    ns_softhca)
        ip netns exec shbm-a timeout 180 mpirun --allow-run-as-root "${across[@]}" "${ucx[@]}" \
            -np 1 "${quiet[@]}" "${rc[@]}" -x UCX_NET_DEVICES=shbma0:1 \
            "$PWD/$softhca" exec --prefix shbma -- "$mpi_apps" "$n" : \
            -np 1 "${quiet[@]}" "${rc[@]}" -x UCX_NET_DEVICES=shbmb0:1 \
            "$PWD/$softhca" exec --prefix shbmb -- "$mpi_apps" "$n" ;;
    ns_tcp)
        ip netns exec shbm-a timeout 180 mpirun --allow-run-as-root "${across[@]}" \
            -mca pml ob1 -mca btl tcp,self -mca btl_tcp_if_include 198.18.2.0/24 -np 2 \
            "$mpi_apps" "$n" ;;
    esac 2>/dev/null |
        awk '{v[$1 " " $2] = $4} END {print v["pingpong 8"], v["pingpong 1048576"], v["allreduce 1048576"]}'
}
# mpi_table SOFTHCA_MODE OTHER_MODE: the three rows, softhca's beside the other's.
mpi_table() {
    local v_lat v_bw v_sum t_lat t_bw t_sum
    printf "%-24s %10s %10s %7s\n" test softhca "$3" ratio
    read -r v_lat v_bw v_sum <<<"$(mpi "$1")"
    read -r t_lat t_bw t_sum <<<"$(mpi "$2")"
    printf "%-24s %10s %10s %7s\n" "pingpong 8 B (us)" "$v_lat" "$t_lat" "$(ratio "$t_lat" "$v_lat")" \
        "pingpong 1 MiB (MB/s)" "$v_bw" "$t_bw" "$(ratio "$v_bw" "$t_bw")" \
        "allreduce 1 MiB (us)" "$v_sum" "$t_sum" "$(ratio "$t_sum" "$v_sum")"
}
# Gloo (softhca-gloo-bench: ring allreduce of 1 MiB of floats, checked), two ranks, over
# its ibverbs transport on softhca's two devices, beside its TCP transport on loopback.
gloo() {
    local store n=$((iters < 2000 ? 20 : 100)) pids=() rank
    store=$(mktemp -d -p "$work")
    for rank in 0 1; do
        if [ "$1" = softhca ]; then
            "$softhca" exec --prefix "$prefix" -- timeout 120 build/tools/softhca-gloo-bench \
                "ibverbs:${prefix}$rank" "$rank" 2 "$store" 1048576 "$n" >"$store.$rank" 2>&1 &
        else
            timeout 120 build/tools/softhca-gloo-bench tcp "$rank" 2 "$store" 1048576 "$n" \
                >"$store.$rank" 2>&1 &
        fi
        pids+=($!)
    done
    wait "${pids[@]}" 2>/dev/null || true
    awk '$1 == "allreduce" {print $4}' "$store.0"
}
if [ -x "$mpi_apps" ] && command -v mpirun >/dev/null; then
    echo "Applications: Open MPI, shared memory off on both sides: pml ucx over softhca RC (a rank per device) vs ob1/tcp on loopback"
    mpi_table softhca tcp tcp
    echo "Applications: Open MPI on one host as users run it: pml ucx, every UCX transport (sm, cma, softhca rc_verbs) vs ob1 with its shared-memory BTL"
    mpi_table ucx vader vader
else
    echo "Applications: Open MPI skipped (build/tools/softhca-mpi-bench or mpirun missing: tools/install-deps.sh)"
fi
if [ -x build/tools/softhca-gloo-bench ]; then
    echo "Applications: Gloo ring allreduce, ibverbs transport on softhca vs its TCP transport on loopback"
    printf "%-24s %10s %10s %7s\n" test softhca tcp ratio
    v=$(gloo softhca)
    t=$(gloo tcp)
    printf "%-24s %10s %10s %7s\n" "allreduce 1 MiB (us)" "$v" "$t" "$(ratio "$t" "$v")"
else
    echo "Applications: Gloo skipped (build/tools/softhca-gloo-bench missing: tools/install-deps.sh)"
fi

# The same perftest runs over each kind of port, between two engines (or two devices of
# one): the built-in wire (DPDK ring ethdevs), memif (shared-memory DPDK ports between two
# engines) and the kernel UDP socket port (io_uring) over loopback. Heap buffers, 64 KiB
# writes and 8-byte sends. (Ports on a veth: the two hosts section below.)
#   on_pair NS_A PREFIX_A DEV_A NS_B PREFIX_B DEV_B ADDR TOOL SIZE COLUMN [ARGS...]
on_pair() {
    local ns_a=$1 prefix_a=$2 dev_a=$3 ns_b=$4 prefix_b=$5 dev_b=$6 addr=$7 tool=$8 size=$9
    local column=${10}
    shift 10
    local in_a=() in_b=() port
    [ -n "$ns_a" ] && in_a=(ip netns exec "$ns_a")
    [ -n "$ns_b" ] && in_b=(ip netns exec "$ns_b")
    port=$(free_port)
    "${in_a[@]}" "$softhca" exec --prefix "$prefix_a" -- timeout 120 "$tool" -d "$dev_a" -x 0 \
        -p "$port" -s "$size" -n "$iters" "$@" >/dev/null 2>&1 &
    local server=$!
    sleep 0.3
    "${in_b[@]}" "$softhca" exec --prefix "$prefix_b" -- timeout 120 "$tool" -d "$dev_b" -x 0 \
        -p "$port" -s "$size" -n "$iters" "$@" "$addr" 2>/dev/null |
        awk -v size="$size" -v col="$column" '$1 == size && NF >= col {print $col; exit}'
    wait "$server" 2>/dev/null || true
}
port_row() {
    local name=$1
    shift
    local w s l
    w=$(on_pair "$@" ib_write_bw 65536 4)
    s=$(on_pair "$@" ib_send_bw 65536 4)
    l=$(on_pair "$@" ib_send_lat 8 5)
    printf "%-26s %9s %9s %9s %7s %7s\n" "$name" "$w" "$s" "$l" "$(ratio "$w" "$t64")" \
        "$(ratio "$t8" "$l")"
}
echo "Port types: 64 KiB write and send bandwidth (MB/s), 8 B send latency (us), heap buffers"
printf "%-26s %9s %9s %9s %7s %7s\n" port write send lat "w/tcp" "tcp/lat"
t64=$(tcp tcp_bw 65536)
t8=$(tcp tcp_lat 8)
port_row "ring (built-in wire)" "" "$prefix" "${prefix}0" "" "$prefix" "${prefix}1" 127.0.0.1
"$softhca" down --prefix "$prefix" >/dev/null
memif_socket="$work/memif.sock"
"$softhca" up --prefix shbma --port "net_memif0,role=server,socket=$memif_socket@198.18.14.1" >/dev/null
"$softhca" up --prefix shbmb --port "net_memif0,role=client,socket=$memif_socket@198.18.14.2" >/dev/null
sleep 1
port_row "memif (two engines)" "" shbma shbma0 "" shbmb shbmb0 127.0.0.1
"$softhca" down --prefix shbma >/dev/null
"$softhca" down --prefix shbmb >/dev/null
"$softhca" up --prefix shbu --port udp@127.0.0.1 --port udp@127.0.0.2 >/dev/null
port_row "udp over loopback" "" shbu shbu0 "" shbu shbu1 127.0.0.1
"$softhca" down --prefix shbu >/dev/null

# Two hosts: two namespaces joined by a veth (tools/netns-pair.sh), an engine in each,
# beside TCP (qperf) over a veth of the same MTU in the same run, at the veth's MTU 1500 and
# 9000 (the ports take it: path MTU 1024 and 4096; af_xdp 3500 and 2048). Heap buffers.
#   veth_tcp MTU: TCP (qperf, 64 KiB bandwidth and 8-byte latency) between two namespaces
#   of their own joined by a plain veth of that MTU, what the two hosts would otherwise
#   use (an af_xdp port's XDP program would cost TCP its GRO and GSO on the port's veth).
veth_tcp() {
    local mtu=$1 server
    ip netns add shbt-a
    ip netns add shbt-b
    ip link add shbtva netns shbt-a mtu "$mtu" type veth peer name shbtvb netns shbt-b mtu "$mtu"
    ip -n shbt-a addr add 198.18.3.1/24 dev shbtva
    ip -n shbt-b addr add 198.18.3.2/24 dev shbtvb
    for ns in shbt-a shbt-b; do ip -n "$ns" link set lo up; done
    ip -n shbt-a link set shbtva up
    ip -n shbt-b link set shbtvb up
    ip netns exec shbt-a qperf >/dev/null 2>&1 &
    server=$!
    sleep 0.5
    local test size
    for run in "tcp_bw 65536" "tcp_lat 8"; do
        read -r test size <<<"$run"
        ip netns exec shbt-b qperf -t 2 --msg_size "$size" -uu 198.18.3.1 "$test" 2>/dev/null |
            awk '$1 == "bw" {printf "%.2f ", $3 / 1e6; exit} $1 == "latency" {printf "%.2f\n", $3 / 1000; exit}'
    done
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    ip netns del shbt-a
    ip netns del shbt-b
}
echo "Two hosts over a veth: write/send bandwidth (MB/s) and 8 B send latency (us), TCP over a veth of the same MTU"
printf "%-18s %8s %8s %8s %7s %8s %7s %6s %6s %7s\n" port "w 64K" "w 1M" "s 64K" lat \
    "tcp 64K" "tcp lat" "w/tcp" "s/tcp" "tcp/lat"
for kind in af_packet udp af_xdp; do
    # XDP on a veth takes frames of up to a page: af_xdp's jumbo frames are 3500 bytes.
    mtus="1500 9000"
    [ "$kind" = af_xdp ] && mtus="1500 3500"
    for mtu in $mtus; do
        pair_kind=$kind
        [ "$kind" = af_packet ] && pair_kind=
        read -r tb tl <<<"$(veth_tcp "$mtu")"
        SOFTHCA=$softhca SOFTHCA_PAIR_PORT=$pair_kind SOFTHCA_PAIR_MTU=$mtu \
            tools/netns-pair.sh up shbp >/dev/null
        set -- shbp-a shbpa shbpa0 shbp-b shbpb shbpb0 198.18.2.1
        w=$(on_pair "$@" ib_write_bw 65536 4)
        w1=$(on_pair "$@" ib_write_bw 1048576 4)
        s=$(on_pair "$@" ib_send_bw 65536 4)
        l=$(on_pair "$@" ib_send_lat 8 5)
        tools/netns-pair.sh down shbp >/dev/null
        printf "%-18s %8s %8s %8s %7s %8s %7s %6s %6s %7s\n" "$kind, MTU $mtu" "$w" "$w1" "$s" \
            "$l" "$tb" "$tl" "$(ratio "$w" "$tb")" "$(ratio "$s" "$tb")" "$(ratio "$tl" "$l")"
    done
done

# Open MPI between the two "hosts": an engine in each namespace on a udp port (MTU 1500),
# beside ob1 over TCP on the same veth. mpirun runs in shbm-a and starts the rank of
# 198.18.2.2 in shbm-b through an rsh agent that enters the namespace.
if [ -x "$mpi_apps" ] && command -v mpirun >/dev/null; then
    cat >"$work/netns-agent" <<'AGENT'
#!/bin/sh
host=$1
shift
ns=shbm-a
[ "$host" = 198.18.2.2 ] && ns=shbm-b
exec ip netns exec "$ns" sh -c "$*"
AGENT
    chmod +x "$work/netns-agent"
    SOFTHCA=$softhca SOFTHCA_PAIR_PORT=udp tools/netns-pair.sh up shbm >/dev/null
    ip -n shbm-a link set lo up
    ip -n shbm-b link set lo up
    echo "Applications: Open MPI across two namespaces (udp ports, MTU 1500): pml ucx over an engine in each vs ob1/tcp over the same veth"
    mpi_table ns_softhca ns_tcp tcp
    tools/netns-pair.sh down shbm >/dev/null
fi

# Bandwidth against message size, softhca (both memory kinds) and TCP.
awk '$2 == "heap"' "$work/bw.dat" >"$work/heap.dat"
awk '$2 == "shared"' "$work/bw.dat" >"$work/shared.dat"
gnuplot <<EOF
set terminal pngcairo size 900,560 noenhanced
set output "$plot"
set title "softhca $(git rev-parse --short HEAD 2>/dev/null) vs TCP over loopback, $(nproc) cores, $(date -u +%F)"
set logscale x 2
set xrange [4:2097152]
set format x "%.0b%B"
set xlabel "message size (bytes; Ki = 1024)"
set ylabel "MB/s"
set key top left
set grid
plot "$work/heap.dat" using 1:3 with linespoints title "ib_write_bw (heap buffers)", \
     "$work/heap.dat" using 1:4 with linespoints title "ib_read_bw (heap)", \
     "$work/heap.dat" using 1:5 with linespoints title "ib_send_bw (heap)", \
     "$work/shared.dat" using 1:3 with linespoints title "ib_write_bw (shared file)", \
     "$work/heap.dat" using 1:6 with linespoints lw 3 lc rgb "black" title "qperf tcp_bw"
EOF
echo "plot: $plot"
