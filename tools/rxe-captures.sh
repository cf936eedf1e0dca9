#!/usr/bin/env bash
# Regenerates the Linux Soft-RoCE captures of tests/vectors (tests/vectors/README.md says
# what each holds and how it was made): two QEMU guests of tools/rxe-guest/ (Debian 12's
# kernel with rdma_rxe) on a bridge inside a network namespace of this script's own, the
# same programs run between them as for the committed files, the bridge captured with
# dumpcap into classic pcap files (UDP 4791 only; UDP 4791 and ARP for rxe-cm-*).
#
#   tools/rxe-captures.sh OUTDIR [NAME...]   # NAME: a capture (without .pcap); default all
#
# Every capture boots a fresh pair of guests, so that its QP numbers start at 0x11 as in
# the committed files (rxe numbers QPs from 0x11 up and never reuses one), and is taken
# again on fresh guests (up to RXE_CAPTURE_ATTEMPTS times, default 3) when a program or a
# guest's serial console failed, or when a packet was retransmitted without loss (then the
# last attempt's file is kept all the same). OUTDIR/NAME.pcap is written only for a capture
# whose programs all did what was expected and whose every ICRC checks. Needs root, QEMU
# (tools/rxe-guest.sh installs it) and dumpcap (Debian package tshark). QEMU runs without
# KVM here: a capture takes 30 to 60 s, all nine 6 to 8 minutes on two cores.
#
# Network: the namespace (RXE_CAPTURE_NS, default shcap) holds a bridge and one tap per
# guest and nothing else; the bridge has no address, so everything the guests send stays
# on it. Addresses as in the committed files: 198.18.7.2 (server) and 198.18.7.4 (client)
# for the verbs captures, 198.18.9.2 (listener) and 198.18.9.3 (client) for the rdma_cm
# ones; for IPv6 2001:2:0:7::2 and 2001:2:0:7::4 (the committed IPv6 capture has
# 2001:db8:7::, which this project's networks may not use). MACs 52:54:00:00:SUBNET:HOST.
# The 3% loss is netem in the client guest (the host's kernel may have no netem).
# RXE_CAPTURE_BOOT_TIMEOUT bounds a guest's boot (default 600 s).
set -euo pipefail

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed -n 's/^# \{0,1\}//p' >&2
    exit 2
}
if [ $# -lt 1 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
    usage
fi
out=$(realpath -m "$1")
shift
all=(rxe-rc-uc-ud-ipv4 rxe-ipv6-and-pingpong rxe-cas-write-read-only rxe-rc-3pct-loss
    rxe-cm-rping rxe-cm-reject rxe-cm-udaddy rxe-cm-ucmatose-2conn rxe-cm-mckey-multicast)
names=("$@")
[ ${#names[@]} -gt 0 ] || names=("${all[@]}")
for name in "${names[@]}"; do
    [[ " ${all[*]} " = *" ${name%.pcap} "* ]] ||
        { echo "rxe-captures: no capture '$name' (${all[*]})" >&2; exit 2; }
done
[ "$(id -u)" -eq 0 ] || { echo "rxe-captures: needs root (namespaces, taps)" >&2; exit 1; }
command -v dumpcap >/dev/null ||
    { echo "rxe-captures: no dumpcap (apt-get install tshark)" >&2; exit 1; }
repo=$(cd "$(dirname "$0")/.." && pwd)
src=${SOFTHCA_RXE_GUEST_SRC:-$repo/tools/rxe-guest}
ns=${RXE_CAPTURE_NS:-shcap}
attempts=${RXE_CAPTURE_ATTEMPTS:-3}
mkdir -p "$out"

# One run at a time: a second one would share the namespace's name.
exec {lock_fd}>"/run/lock/softhca-rxe-captures-$ns.lock"
flock -n "$lock_fd" || { echo "rxe-captures: another run uses namespace $ns" >&2; exit 1; }
guest=$("$repo/tools/rxe-guest.sh")

# What this script started, stopped by pid (never by name) on every exit.
declare -A qemu_pid=() console_fd=()
capture_pid=

stop_capture() {
    [ -n "$capture_pid" ] || return 0
    kill -INT "$capture_pid" 2>/dev/null || true
    wait "$capture_pid" 2>/dev/null || true
    capture_pid=
}

stop_guests() {
    local g fd
    for g in "${!console_fd[@]}"; do
        # The console's shell powers the guest off at the end of its input.
        fd=${console_fd[$g]}
        exec {fd}>&-
        unset "console_fd[$g]"
    done
    for g in "${!qemu_pid[@]}"; do
        for _ in $(seq 50); do kill -0 "${qemu_pid[$g]}" 2>/dev/null || break; sleep 0.1; done
        # run.sh ends in `exec timeout ... qemu`: timeout passes TERM on to QEMU.
        kill "${qemu_pid[$g]}" 2>/dev/null || true
        wait "${qemu_pid[$g]}" 2>/dev/null || true
        unset "qemu_pid[$g]"
    done
}

teardown() {
    stop_capture
    stop_guests
    ip netns del "$ns" 2>/dev/null || true
}

cleanup() {
    teardown
    rm -rf "$work"
}
work=$(mktemp -d /tmp/rxe-captures.XXXXXX)
trap cleanup EXIT
trap 'exit 130' INT TERM
# A guest that is gone must fail a write to its console with EPIPE, not end this script.
trap '' PIPE

log() { echo "rxe-captures: $*" >&2; }

# Waits until the shell test $1 holds, for at most $2 seconds.
wait_until() {
    local deadline=$((SECONDS + $2))
    until eval "$1"; do
        [ $SECONDS -lt $deadline ] || return 1
        sleep 0.2
    done
}

# The namespace: a bridge without an address and one tap per guest; no IPv6 on either,
# so the host side sends nothing of its own (no router or neighbour solicitations).
net_up() {
    ip netns del "$ns" 2>/dev/null || true
    ip netns add "$ns"
    local n="ip -n $ns"
    $n link set lo up
    # No multicast snooping: mckey's group has no querier, and must be flooded.
    $n link add "${ns}br" type bridge mcast_snooping 0
    ip netns exec "$ns" sysctl -qw "net.ipv6.conf.${ns}br.disable_ipv6=1"
    local t
    for t in s c; do
        $n tuntap add dev "${ns}t$t" mode tap
        ip netns exec "$ns" sysctl -qw "net.ipv6.conf.${ns}t$t.disable_ipv6=1"
        $n link set "${ns}t$t" master "${ns}br"
        # QEMU without KVM drains its tap slowly: a deep queue keeps bursts whole, so that
        # the bridge drops nothing.
        $n link set "${ns}t$t" txqueuelen 10000
        $n link set "${ns}t$t" up
    done
    $n link set "${ns}br" up
}

# Boots guest G (s: server, c: client) with IPV4 and MAC on tap ${ns}tG; its shell reads
# the FIFO work/G.in (held open as console_fd[G]) and writes work/G.log.
boot() {
    local g=$1 ip=$2 mac=$3
    rm -f "$work/$g.in" "$work/$g.log"
    mkfifo "$work/$g.in"
    # A guest serves one capture; 30 minutes bound one that nothing stops.
    RXE_GUEST_TIMEOUT=1800 ip netns exec "$ns" "$src/run.sh" \
        "$guest" "${ns}t$g" "$ip" "$mac" sh <"$work/$g.in" >"$work/$g.log" 2>&1 &
    qemu_pid[$g]=$!
    local fd
    exec {fd}>"$work/$g.in"
    console_fd[$g]=$fd
    echo 0 >"$work/$g.seq"
}

# Waits for guest G's rxe0 and sets its shell up: no echo, no prompt, so that its console
# carries only output.
ready() {
    local g=$1
    wait_until "grep -qa RXE-READY '$work/$g.log'" "${RXE_CAPTURE_BOOT_TIMEOUT:-600}" || {
        log "guest $g did not come up: $(tail -20 "$work/$g.log")"
        return 1
    }
    printf '%s\n' 'stty -echo; PS1=""' >&"${console_fd[$g]}"
    run "$g" 60 true >/dev/null
}

# Starts COMMAND in guest G; the job's number in JOB. The markers are split in the line
# so that only the output carries them.
start() {
    local g=$1 cmd=$2
    JOB=$(($(cat "$work/$g.seq") + 1))
    echo "$JOB" >"$work/$g.seq"
    cmd=${cmd//@JOB@/$JOB}
    printf '%s\n' "echo CAP\"\"B$JOB; ( $cmd ) </dev/null 2>&1; echo CAP\"\"E$JOB \$?" \
        >&"${console_fd[$g]}"
}

# Waits for job JOB of guest G; prints its output and returns its exit status (124 when it
# did not end within SECONDS).
finish() {
    local g=$1 job=$2 seconds=$3
    wait_until "grep -qa 'CAPE$job ' '$work/$g.log'" "$seconds" || {
        # A serial console under QEMU without KVM on a loaded machine may lose input.
        tr -d '\r' <"$work/$g.log" | grep -qax "CAPB$job" ||
            log "guest $g never began command $job: its console lost input"
        log "guest $g: command $job did not end within $seconds s:" \
            "$(tail -20 "$work/$g.log" | tr -d '\r')"
        return 124
    }
    tr -d '\r' <"$work/$g.log" | sed -n "/^CAPB$job\$/,/^CAPE$job /p" | sed '1d;$d'
    local rc
    rc=$(tr -d '\r' <"$work/$g.log" | sed -n "s/^CAPE$job \([0-9]*\)\$/\1/p")
    return "${rc:-1}"
}

# Runs COMMAND in guest G, for at most SECONDS.
run() {
    start "$1" "$3"
    finish "$1" "$JOB" "$2"
}

# The GID index of rxe0 in guest G for ADDRESS (IPv4 or IPv6).
gid_index() {
    local g=$1 addr=$2 gids index
    for _ in $(seq 60); do
        gids=$(run "$g" 60 'ibv_devinfo -v -d rxe0') || return 1
        if [[ $addr = *:* ]]; then
            index=$(sed -n "s/.*GID\[ *\([0-9]*\)\]:[[:space:]]*$addr, RoCE v2.*/\1/p" <<<"$gids")
        else
            index=$(sed -n "s/.*GID\[ *\([0-9]*\)\]:.*::ffff:$addr, RoCE v2.*/\1/p" <<<"$gids")
        fi
        index=${index%%$'\n'*}
        [ -n "$index" ] && { echo "$index"; return 0; }
        sleep 0.5
    done
    log "guest $g: no RoCE v2 GID for $addr: $gids"
    return 1
}

# Both guests of one capture on subnet 198.18.SUBNET.0/24: the server at .2, the client at
# .CLIENT; with IPV6 set both also get 2001:2:0:SUBNET::HOST. Sets S_IP, C_IP, S_GID,
# C_GID (and S_IP6, S_GID6, C_GID6).
guests_up() {
    local subnet=$1 client=$2 ipv6=${3:-}
    S_IP=198.18.$subnet.2 C_IP=198.18.$subnet.$client
    boot s "$S_IP" "52:54:00:00:$(printf %02x "$subnet"):02"
    boot c "$C_IP" "52:54:00:00:$(printf %02x "$subnet"):$(printf %02x "$client")"
    ready s && ready c || return 1
    S_GID=$(gid_index s "$S_IP") && C_GID=$(gid_index c "$C_IP") || {
        log "no GID index for the guests' IPv4 addresses"
        return 1
    }
    if [ -n "$ipv6" ]; then
        S_IP6=2001:2:0:$subnet::2
        local c_ip6=2001:2:0:$subnet::$client
        # No duplicate address detection (busybox's ip has no nodad): the address is
        # ours alone, and usable, with its GID, at once.
        local g a
        for g in s c; do
            a=$S_IP6
            [ $g = c ] && a=$c_ip6
            run $g 30 "echo 0 >/proc/sys/net/ipv6/conf/eth0/accept_dad && \
                ip -6 addr add $a/64 dev eth0" >/dev/null || {
                log "guest $g: no IPv6 address: $(tail -5 "$work/$g.log")"
                return 1
            }
        done
        S_GID6=$(gid_index s "$S_IP6") && C_GID6=$(gid_index c "$c_ip6") || {
            log "no GID index for the guests' IPv6 addresses"
            return 1
        }
    fi
    local ipv6_gids=${ipv6:+, IPv6 $S_IP6 (GID $S_GID6) and $c_ip6 (GID $C_GID6)}
    log "guests up (Linux $(run s 30 'uname -r')): server $S_IP (GID $S_GID)," \
        "client $C_IP (GID $C_GID)$ipv6_gids"
}

# netem drops PERCENT of what the client's eth0 sends. iproute2's tc, by its path: the
# guest's busybox sh runs its own tc applet (no netem) for a bare `tc`.
loss() {
    local answer
    answer=$(run c 30 "/bin/tc qdisc add dev eth0 root netem loss $1 && \
        /bin/tc qdisc show dev eth0") &&
        grep -q "netem.*loss $1" <<<"$answer" || {
        log "no netem on the client's eth0: $answer"
        return 1
    }
}

# dumpcap on INTERFACE of the namespace with FILTER into FILE (classic pcap, whole frames);
# returns once it captures.
capture_start() {
    local iface=$1 filter=$2 file=$3
    ip netns exec "$ns" dumpcap -P -i "$iface" -f "$filter" -w "$file" >"$work/dumpcap.log" 2>&1 &
    capture_pid=$!
    wait_until "grep -q '^File:' '$work/dumpcap.log' || ! kill -0 $capture_pid 2>/dev/null" 30 &&
        kill -0 "$capture_pid" 2>/dev/null || {
        log "dumpcap did not start: $(cat "$work/dumpcap.log")"
        return 1
    }
}

# One exchange between a server in guest s and a client in guest c, each an unmodified
# program; both must exit 0. READY says when the server takes connections: tcp:PORT (it
# listens on TCP port PORT), cm (an rdma_cm id listens), or a shell test of the guest's.
# The server is bounded by `timeout`, since one whose client failed may wait forever.
exchange() {
    local ready=$1 server=$2 client=$3
    case $ready in
    tcp:*) ready="netstat -ltn | grep -q ':${ready#tcp:} '" ;;
    cm) ready="rdma res show cm_id | grep -q LISTEN" ;;
    esac
    log "  server: $server"
    log "  client: $client"
    # The guest's shell waits for the server within the same line, so it reads no input
    # while the server runs (a shell whose input ends powers the guest off).
    local poll="i=0; until $ready; do i=\$((i + 1)); [ \$i -lt 600 ] || break; sleep 0.1; done"
    start s "timeout 300 $server & p=\$!; $poll; echo CAP\"\"R@JOB@; wait \$p"
    local server_job=$JOB
    wait_until "grep -qaw 'CAPR$server_job' '$work/s.log'" 120 || {
        log "the server did not get ready: $(tail -20 "$work/s.log" | tr -d '\r')"
        return 1
    }
    local rc=0 server_rc=0 client_out server_out
    client_out=$(run c 300 "$client") || rc=$?
    server_out=$(finish s "$server_job" 120) || server_rc=$?
    if [ "$rc" -ne 0 ] || [ "$server_rc" -ne 0 ]; then
        # perftest's report needs a clock it could not calibrate under QEMU: the transfer,
        # all the capture wants, went through.
        if grep -q "Correlation coefficient r^2" <<<"$client_out $server_out"; then
            log "  (perftest could not calibrate its clock; the transfer is whole)"
            return 0
        fi
        log "failed: client ($rc): $client_out"
        log "        server ($server_rc): $server_out"
        return 1
    fi
}

# A perftest (ib_*) or pingpong (ibv_*) run between the guests, ARGS as given, over IPv4
# or, with GID=6 before it, over IPv6; the TCP exchange goes to the server's IPv4 address.
# perftest's QPs get an ACK timeout of 1 s (-u 18; the default 14 is 67 ms, which a guest
# without KVM on a busy machine overruns, and the requester retransmits) except under
# loss (LOSSY=1), where the timer is part of the recovery; the timeout is not on the wire.
# ibv_rc_pingpong's is fixed at 67 ms: its rare retransmissions make the capture retaken.
port=18514
tool() {
    local program=$1
    shift
    port=$((port + 1))
    local flag=-x s_gid=$S_GID c_gid=$C_GID args=$*
    [[ $program = ibv_* ]] && flag=-g
    [[ $program = ib_* ]] && [ -z "${LOSSY:-}" ] && args="-u 18 $args"
    [ "${GID:-}" = 6 ] && s_gid=$S_GID6 c_gid=$C_GID6
    exchange "tcp:$port" "$program -d rxe0 $flag $s_gid -p $port $args" \
        "$program -d rxe0 $flag $c_gid -p $port $args $S_IP"
}

# The programs of each capture, between freshly booted guests, while dumpcap records.
# Server and client sides as in the committed files: the client (.4 or .3) sends the
# requests; perftest's and the pingpongs' TCP exchange (not captured) goes guest to guest.
record() {
    local name=$1 file=$2
    case $name in
    rxe-rc-uc-ud-ipv4)
        guests_up 7 4 && capture_start "${ns}br" "udp port 4791" "$file" &&
            tool ib_write_bw -s 3000 -n 20 &&
            tool ib_read_bw -s 3000 -n 20 &&
            tool ib_send_bw -s 3000 -n 20 &&
            tool ib_atomic_bw -n 20 &&
            tool ib_send_bw -c UD -s 512 -n 20 &&
            tool ib_write_bw -c UC -s 3000 -n 20 &&
            tool ibv_rc_pingpong -s 16 -n 20
        ;;
    rxe-ipv6-and-pingpong)
        guests_up 7 4 ipv6 && capture_start "${ns}br" "udp port 4791" "$file" &&
            GID=6 tool ib_send_bw -s 3000 -n 20 &&
            tool ib_write_bw -s 3000 -n 50 &&
            tool ib_read_bw -s 3000 -n 50 &&
            tool ibv_rc_pingpong -s 2000 -n 20 &&
            tool ibv_ud_pingpong -s 500 -n 20
        ;;
    rxe-cas-write-read-only)
        guests_up 7 4 && capture_start "${ns}br" "udp port 4791" "$file" &&
            tool ib_atomic_bw -A CMP_AND_SWAP -n 20 &&
            tool ib_write_lat -s 64 -n 20 &&
            tool ib_read_lat -s 64 -n 20
        ;;
    rxe-rc-3pct-loss)
        # 3% of what the client sends is dropped by netem on its own eth0, before the
        # bridge (this needs no netem in the host's kernel): a lost request is missing
        # from the file (a gap in its PSNs), as the server saw it, and the server's NAKs
        # and the retransmissions follow.
        guests_up 7 4 &&
            loss 3% &&
            capture_start "${ns}br" "udp port 4791" "$file" &&
            LOSSY=1 tool ib_write_bw -s 8000 -n 40 &&
            LOSSY=1 tool ib_read_bw -s 8000 -n 40 &&
            LOSSY=1 tool ib_send_bw -s 8000 -n 40
        ;;
    rxe-cm-rping)
        guests_up 9 3 && capture_start "${ns}br" "udp port 4791 or arp" "$file" &&
            exchange cm "rping -s -a $S_IP -v" "rping -c -a $S_IP -C 5 -v"
        ;;
    rxe-cm-reject)
        # Nobody listens on port 7999: the client's REQ is answered with a REJ.
        guests_up 9 3 && capture_start "${ns}br" "udp port 4791 or arp" "$file" || return 1
        log "  client: rping -c -a $S_IP -p 7999 -C 1 (no listener)"
        local answer
        answer=$(run c 120 "rping -c -a $S_IP -p 7999 -C 1") && {
            log "rping to a port without a listener succeeded: $answer"
            return 1
        }
        grep -q REJECTED <<<"$answer" || {
            log "rping to a port without a listener was not rejected: $answer"
            return 1
        }
        # The committed file goes on to the client's ARP probes of the server's address,
        # 5 to 7 s later (its neighbour entry, used for the REQ, turned stale).
        sleep 7
        ;;
    rxe-cm-udaddy)
        guests_up 9 3 && capture_start "${ns}br" "udp port 4791 or arp" "$file" &&
            exchange cm "udaddy -b $S_IP -C 5" "udaddy -s $S_IP -C 5"
        ;;
    rxe-cm-ucmatose-2conn)
        guests_up 9 3 && capture_start "${ns}br" "udp port 4791 or arp" "$file" &&
            exchange cm "ucmatose -b $S_IP -c 2 -C 5" "ucmatose -s $S_IP -c 2 -C 5"
        ;;
    rxe-cm-mckey-multicast)
        # The receiver is ready once it joined 239.1.1.1 (/proc/net/igmp names the group
        # in host byte order) and has had a moment to attach its QP to it.
        guests_up 9 3 && capture_start "${ns}br" "udp port 4791 or arp" "$file" &&
            exchange "grep -q 010101EF /proc/net/igmp && sleep 1" \
                "mckey -m 239.1.1.1 -b $S_IP -C 5" "mckey -m 239.1.1.1 -s -b $C_IP -C 5"
        ;;
    esac || return 1
    # Late ACKs and answers.
    sleep 1
}

# Checks a capture: every RoCEv2 frame's ICRC (IBTA 7.8.1 and Annex A17: the CRC over 8
# bytes of ones for the LRH, the IP and UDP headers and the IB packet, their variant fields
# as ones), and counts retransmissions (a packet of a connected QP whose sender, QP, opcode
# and PSN came before). Prints what it found; exits 1 on a bad or cut frame or a file
# without RoCEv2, 3 when all is well but for a retransmission.
check_capture() {
    python3 - "$1" <<'PY'
import struct, sys, zlib

def frames(path):
    data = open(path, "rb").read()
    order = "<" if struct.unpack("<I", data[:4])[0] in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    if struct.unpack(order + "I", data[20:24])[0] != 1:
        sys.exit(f"{path}: not an Ethernet capture")
    at = 24
    while at < len(data):
        _, _, kept, length = struct.unpack(order + "IIII", data[at:at + 16])
        at += 16
        yield data[at:at + kept], kept == length
        at += kept

# (valid ICRC, retransmission key) of a RoCEv2 frame; None for another one.
def roce(frame):
    ethertype, ip = struct.unpack(">H", frame[12:14])[0], frame[14:]
    if ethertype == 0x0800:
        ihl = (ip[0] & 15) * 4
        if ip[9] != 17 or struct.unpack(">H", ip[ihl + 2:ihl + 4])[0] != 4791:
            return None
        header = bytearray(ip[:ihl])
        header[1] = header[8] = 0xFF  # TOS, TTL
        header[10:12] = b"\xff\xff"  # header checksum
        end, source = struct.unpack(">H", ip[2:4])[0], ip[12:16]
    elif ethertype == 0x86DD:
        ihl = 40
        if ip[6] != 17 or struct.unpack(">H", ip[42:44])[0] != 4791:
            return None
        header = bytearray(ip[:40])
        header[0] |= 0x0F  # traffic class and flow label
        header[1:4] = b"\xff\xff\xff"
        header[7] = 0xFF  # hop limit
        end, source = 40 + struct.unpack(">H", ip[4:6])[0], ip[8:24]
    else:
        return None
    udp = bytearray(ip[ihl:ihl + 8])
    udp[6:8] = b"\xff\xff"  # checksum
    ib = bytearray(ip[ihl + 8:end - 4])
    ib[4] = 0xFF  # BTH FECN, BECN, resv6
    crc = zlib.crc32(b"\xff" * 8 + bytes(header) + bytes(udp) + bytes(ib))
    valid = struct.unpack("<I", ip[end - 4:end])[0] == crc
    opcode, qp, psn = ib[0], ib[5:8], ib[9:12]
    # RC and UC only (opcode bits 7-5: 000 RC, 001 UC); UD's QP1 and multicast vary.
    key = (source, bytes(qp), opcode, bytes(psn)) if opcode >> 5 in (0, 1) else None
    return valid, key

path = sys.argv[1]
count = good = other = cut = again = 0
seen, again_qps = set(), set()
for frame, whole in frames(path):
    if not whole:
        cut += 1
        continue
    found = roce(frame)
    if found is None:
        other += 1
        continue
    count += 1
    good += found[0]
    if found[1] is not None:
        if found[1] in seen:
            again += 1
            again_qps.add(int.from_bytes(found[1][1], "big"))
        seen.add(found[1])
qps = " on QP " + ", ".join(f"{qp:#x}" for qp in sorted(again_qps)) if again else ""
print(f"{count} RoCEv2 frames, {good} with a valid ICRC, {again} retransmitted{qps};"
      f" {other} other (ARP)" + (f"; {cut} cut short" if cut else ""))
sys.exit(1 if good != count or cut or not count else 3 if again else 0)
PY
}

# Each capture into work/, then to OUTDIR once whole and checked. A retransmission that
# no loss asked for (QEMU without KVM on a busy machine may answer later than a QP's ACK
# timeout: ibv_rc_pingpong's is 67 ms) makes a file unlike the committed one: such a
# capture is taken again, and its last attempt kept.
started=$SECONDS
status=0
for name in "${names[@]}"; do
    name=${name%.pcap}
    for attempt in $(seq "$attempts"); do
        log "$name (attempt $attempt of $attempts)"
        began=$SECONDS
        file=$work/$name.pcap
        rm -f "$file"
        net_up
        ok=0
        record "$name" "$file" && ok=1
        teardown
        if [ "$ok" = 1 ]; then
            checked=0
            check_capture "$file" >"$work/check" 2>&1 || checked=$?
            log "$name: $(cat "$work/check")"
            if [ "$checked" = 3 ] && [ "$name" != rxe-rc-3pct-loss ] &&
                [ "$attempt" -lt "$attempts" ]; then
                log "$name: a retransmission without loss: taking it again"
            elif [ "$checked" = 0 ] || [ "$checked" = 3 ]; then
                chmod 644 "$file"
                mv "$file" "$out/$name.pcap"
                log "$name: $out/$name.pcap in $((SECONDS - began)) s"
                continue 2
            fi
        fi
        log "$name: attempt $attempt failed after $((SECONDS - began)) s"
    done
    status=1
done
log "done in $((SECONDS - started)) s"
exit "$status"
