#!/usr/bin/env python3
"""Seeds for the fuzz targets, cut from the Linux Soft-RoCE captures (tests/vectors).

    fuzz/seeds.py VECTORS_DIR SEEDS_DIR

Writes, under SEEDS_DIR/<target>/: every frame of every capture for roce_frame; the
QP1 MADs (destination QP 1, behind BTH and DETH) for cm_mad, and the same MADs for
ib_cm in its step encoding (the default config, the MAD injected into side 1 whole,
then time passing; ib_cm writes seeds of its own too); and, for
transport_receive, the captures' IB packets sixteen at a time, length-prefixed, as that
target reads them (an RC QP in RTS fed its packets). control_messages and rdma_cm get
empty folders: rdma_cm writes seeds of its own (SOFTHCA_FUZZ_SEEDS, tools/fuzz.sh).
"""
import os, struct, sys
vectors, seeds = sys.argv[1], sys.argv[2]
for d in ("roce_frame", "cm_mad", "ib_cm", "transport_receive", "control_messages", "rdma_cm"):
    os.makedirs(os.path.join(seeds, d), exist_ok=True)
def frames(path):
    data = open(path, "rb").read()
    endian = "<" if data[:4] == b"\xd4\xc3\xb2\xa1" else ">"
    at = 24
    while at + 16 <= len(data):
        incl = struct.unpack(endian + "I", data[at + 8:at + 12])[0]
        yield data[at + 16:at + 16 + incl]
        at += 16 + incl
for name in sorted(os.listdir(vectors)):
    if not name.endswith(".pcap"):
        continue
    packets = []
    for i, f in enumerate(frames(os.path.join(vectors, name))):
        open(os.path.join(seeds, "roce_frame", f"{name}-{i}"), "wb").write(f)
        if len(f) < 14 + 20 + 8 + 12:
            continue
        ip = 14 + (40 if f[12:14] == b"\x86\xdd" else (f[14] & 0xF) * 4)
        ib = f[ip + 8:len(f) - 4]
        packets.append(ib)
        if len(ib) > 12 + 8 and ib[7] == 1:  # destination QP 1: a MAD behind BTH and DETH
            open(os.path.join(seeds, "cm_mad", f"{name}-{i}"), "wb").write(ib[20:])
            mad = ib[20:20 + 256].ljust(256, b"\0")
            steps = bytes([0, 0, 4, 0xC1, 0x01]) + mad + bytes([0xF0, 60, 20])
            open(os.path.join(seeds, "ib_cm", f"{name}-{i}"), "wb").write(steps)
    # One transport input per capture direction: an RC QP in RTS fed its packets.
    for start in range(0, len(packets), 16):
        chunk = packets[start:start + 16]
        blob = bytes([0, 1]) + b"".join(struct.pack(">H", len(p)) + p for p in chunk)
        open(os.path.join(seeds, "transport_receive", f"{name}-{start}"), "wb").write(blob)
