#!/usr/bin/env bash
# Quick start, step (a): install what softhca needs, build it, bring up the default
# devices (softhca0 and softhca1, wired back to back inside the engine) and run an
# unmodified verbs program between them: perftest's ib_write_bw, server on softhca0,
# client on softhca1. Run as root on Debian 12.
#
# Only what this needs is installed and built: the engine, the provider, the preload
# library and the `softhca` command (the target `softhca` depends on the other three).
# The tests are configured and built by tools/run-tests.sh (tools/build.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh --quick
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTING=OFF >/dev/null
cmake --build build -j"$(nproc)" --target softhca
build/tools/softhca up
build/tools/softhca exec -- ib_write_bw -d softhca0 -x 0 >/tmp/softhca-quickstart-server.log 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
# The client starts once the server listens for perftest's TCP exchange (port 18515).
for _ in $(seq 100); do
    ss -Hltn 'sport = :18515' | grep -q . && break
    kill -0 $server 2>/dev/null || { cat /tmp/softhca-quickstart-server.log >&2; exit 1; }
    sleep 0.1
done
build/tools/softhca exec -- ib_write_bw -d softhca1 -x 0 127.0.0.1
wait $server
