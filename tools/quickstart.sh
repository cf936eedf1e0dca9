#!/usr/bin/env bash
# Quick start, step (a): install what softhca needs, build it, bring up the default
# devices (softhca0 and softhca1, wired back to back inside the engine) and run an
# unmodified verbs program between them: perftest's ib_write_bw, server on softhca0,
# client on softhca1. Run as root on Debian 12.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
tools/build.sh
build/tools/softhca up
build/tools/softhca exec -- ib_write_bw -d softhca0 -x 0 >/tmp/softhca-quickstart-server.log 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
sleep 1
build/tools/softhca exec -- ib_write_bw -d softhca1 -x 0 127.0.0.1
wait $server
