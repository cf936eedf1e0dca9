#!/usr/bin/env bash
# Quick start, step (b): install, check the layers, build, check formatting, and run the
# whole test suite. Run as root on Debian 12. This is what CI runs (.ci/run).
#
#   tools/run-tests.sh           the whole suite
#   tools/run-tests.sh --quick   a change's first check: the unit and tools tests and an
#                                end-to-end core (each transport once, verbs integrity and
#                                bad input, rdma_cm's tools, perftest, UCX)
#
# Each run ends with its slowest tests (from build/test-results.xml, JUnit).
set -euo pipefail
cd "$(dirname "$0")/.."
quick=
case "${1:-}" in
--quick) quick=1 ;;
"") ;;
*) echo "usage: tools/run-tests.sh [--quick]" >&2; exit 2 ;;
esac

# The end-to-end core of --quick, by full test name.
core=(
    "e2e: ibv_devices lists the devices"
    "e2e: ibv_rc_pingpong at 1 B to 1 MiB"
    "e2e: ibv_uc_pingpong at 4 KiB and 64 KiB"
    "e2e: ibv_ud_pingpong at 2 KiB and 4 KiB"
    "e2e: ibv_xsrq_pingpong at 4 KiB and 64 KiB"
    "e2e: RC verbs: data integrity, atomics and error statuses"
    "e2e: verbs bad input and control socket garbage"
    "e2e: SIGKILLed process leaves no objects"
    "e2e: rdma_cm: rping, ucmatose, udaddy, mckey, rdma_server, rsockets, perftest -R, no listener"
    "e2e: perftest ib_write_bw"
    "e2e: perftest ib_send_bw"
    "e2e: ucx_perftest tag_bw over rc_verbs at 1048576 B"
)

tools/install-deps.sh
tools/check-layers.sh
tools/build.sh
tools/check-format.sh
cd build
selection=()
if [ -n "$quick" ]; then
    regex='^unit:|^tools:'
    for name in "${core[@]}"; do
        regex+="|^$(sed 's/[][\.*^$()+?{}|]/\\&/g' <<<"$name")\$"
    done
    selection=(-R "$regex")
    # Every name of the core must still name a test: a renamed test would shrink the
    # core silently.
    names=$(ctest -N | sed -n 's/^ *Test *#[0-9]*: //p')
    for name in "${core[@]}"; do
        grep -qxF -- "$name" <<<"$names" ||
            { echo "run-tests: --quick names a test that does not exist: $name" >&2; exit 1; }
    done
fi
status=0
ctest --output-on-failure --timeout 300 -j2 --output-junit test-results.xml "${selection[@]}" ||
    status=$?
# Where the time went: the slowest tests of this run.
python3 - test-results.xml <<'PY' || true
import sys, xml.etree.ElementTree as ET
cases = [(float(c.get("time", 0)), c.get("name")) for c in ET.parse(sys.argv[1]).iter("testcase")]
print(f"run-tests: {len(cases)} tests, {sum(t for t, _ in cases):.0f} s of test time; the slowest:")
for t, name in sorted(cases, reverse=True)[:15]:
    print(f"  {t:7.1f} s  {name[:100]}")
PY
exit $status
