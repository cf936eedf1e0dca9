#!/usr/bin/env bash
# Quick start, step (b): install, check the engine's layers, build, check formatting, and
# run the whole test suite. Run as root on Debian 12. This is what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
tools/check-layers.sh
tools/build.sh
tools/check-format.sh
cd build
ctest --output-on-failure --timeout 300 -j2
