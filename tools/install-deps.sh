#!/usr/bin/env bash
# Installs the Debian 12 packages softhca needs. Run as root. Safe to run again.
#   tools/install-deps.sh           everything: the build, the whole test suite, benchmarks
#   tools/install-deps.sh --quick   only what the quick start needs (tools/quickstart.sh):
#                                   the engine, provider, preload and softhca, and perftest
set -euo pipefail

# The quick start's share: building the engine, the provider, the preload library and the
# `softhca` command, and the program it runs.
quick=(
    cmake g++ make pkg-config
    # The verbs ABI we implement and the system libibverbs that loads our provider
    libibverbs-dev ibverbs-providers
    # The engine's ports (EAL, ethdev, ring/af_packet/memif/tap PMDs)
    libdpdk-dev
    # The ICRC's CRC-32 at memory speed (ISA-L's PCLMULQDQ/AVX-512 crc32_gzip_refl)
    libisal-dev
    # The kernel UDP socket port (--port udp@ADDR): batched sends and multishot receives
    liburing-dev
    # `softhca status --json` and `softhca watch` (the engine writes, the CLI reads JSON)
    nlohmann-json3-dev
    # The quick start's program (perftest's ib_write_bw) and ss, to see its server listen
    perftest iproute2
)
packages=(
    "${quick[@]}"
    # The format check
    clang-format
    # The fuzz targets (fuzz/, tools/fuzz.sh): clang with libFuzzer and the sanitizers
    clang libclang-rt-14-dev
    # The Debian package (tools/build-deb.sh: CPack runs dpkg-shlibdeps and dpkg-deb)
    dpkg-dev
    # Tests: Catch2, real verbs programs and rdma-core's Python bindings
    catch2 ibverbs-utils python3-pyverbs
    # librdmacm over the emulated rdma_cm device: rping, ucmatose, udaddy, mckey, rstream
    rdmacm-utils librdmacm-dev
    # UCX (ucx_perftest over rc_verbs and ud_verbs): a library that runs on verbs unmodified
    ucx-utils
    # libfabric's verbs provider (fi_info, fi_pingpong over MSG, RDM and DGRAM endpoints)
    libfabric-bin
    # Open MPI over UCX on softhca, and Gloo's ibverbs transport (tests/e2e/test_mpi.sh,
    # test_gloo.sh and bench.sh's applications: tools/apps/)
    openmpi-bin libopenmpi-dev libgloo-dev
    # The status document's schema check (tests/e2e/test_status_json.sh)
    python3-jsonschema
    # Wireshark's own decoding of our captures: DSCP and ECN, CNPs (test_capture_qos.sh)
    tshark
    # af_xdp ports' XDP program (hca_engine/src/ports/xdp): libbpf's headers, built by clang
    libbpf-dev
    # The tools users already have, seeing softhca (tests/e2e/test_diag_tools.sh): ibstat
    # and ibstatus, Prometheus's node_exporter with its infiniband collector, and curl to
    # scrape it
    infiniband-diags prometheus-node-exporter curl
    # Tests and scripts: process inspection, interface offloads (the udp port's GSO cut
    # into packets on a bridge: test_udp_af_packet.sh); network namespaces with iproute2,
    # in the quick share above
    procps ethtool
    # The Linux kernel peer (tools/rxe-guest.sh, tools/rxe-guest/): Debian's kernel with
    # rdma_rxe booted under QEMU, a busybox userland, its initramfs packed with cpio
    qemu-system-x86 busybox-static cpio binutils
)

[ "${1:-}" = --quick ] && packages=("${quick[@]}")
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "install-deps: all ${#packages[@]} packages present"
    exit 0
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
