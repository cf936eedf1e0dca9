#!/usr/bin/env bash
# Configures and builds softhca into build/ (warnings are errors): everything, the tests
# included (tools/quickstart.sh builds only what its job needs, in the same tree).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTING=ON >/dev/null
cmake --build build -j"$(nproc)"
