#!/usr/bin/env bash
# The repository stands alone: no tracked file refers to a folder beside the clone (the
# design notes, captures and guest builder that once lived in a sibling folder) or to a
# path of one machine, and the build takes nothing from above its own source root. A
# clone copied into an empty folder (.ci/run) must pass its own suite.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    list() { git ls-files -z; }
else
    list() { find . -path ./build -prune -o -type f -print0; }
fi
# The patterns are assembled so that this file does not match itself.
# A sibling folder by its relative path, or what once lived there by any path to it
# (the parent's path from "cd .. && pwd", then the folder and what it held).
sibling='\.\./'"shared"'|/'"shared"'/(vectors|rxe-guest|DESIGN\.md)'
machine='/'"work/"
above='CMAKE_SOURCE_DIR}/\.\.|CMAKE_CURRENT_SOURCE_DIR}/\.\./\.\.'
found=$(list | xargs -0 grep -nIE -e "$sibling" -e "$machine" -e "$above" -- 2>/dev/null || true)
if [ -n "$found" ]; then
    echo "FAIL: files refer to paths outside the repository:" >&2
    echo "$found" >&2
    exit 1
fi
echo "PASS: nothing refers to a path outside the repository"
