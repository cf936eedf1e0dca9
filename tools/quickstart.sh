#!/usr/bin/env bash
# Quick start, step (a): install what softhca needs, build it, bring up the default
# devices (softhca0 and softhca1, wired back to back inside the engine) and run an
# unmodified verbs program against them. Run as root on Debian 12.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
tools/build.sh
build/tools/softhca up
build/tools/softhca exec -- ibv_devinfo -v -d softhca0
