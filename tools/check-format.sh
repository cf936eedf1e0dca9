#!/usr/bin/env bash
# Fails when a C++ source in the repository is not clang-formatted.
set -euo pipefail
cd "$(dirname "$0")/.."
git ls-files '*.cpp' '*.hpp' '*.h' | xargs clang-format --dry-run --Werror
echo "check-format: all sources formatted"
