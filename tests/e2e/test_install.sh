#!/usr/bin/env bash
# `cmake --install` into a staging prefix, the staged tree then moved elsewhere (an
# install is relocatable: softhca finds its engine, provider and preload library relative
# to itself), and used from another directory with nothing from the build tree: `softhca
# up` runs the staged engine, the driver file names the staged provider, ibv_devinfo and
# an ib_write_bw run on the devices, `softhca down` removes everything.
#   test_install.sh BUILD_DIR
source "$(dirname "$0")/lib.sh"
build=${1:?build directory}
work=$(mktemp -d)
installed=
trap '[ -n "$installed" ] && "$installed" down >/dev/null 2>&1; rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/stage" >"$work/install.log" 2>&1 ||
    fail "cmake --install failed: $(cat "$work/install.log")"
for part in bin/softhca libexec/softhca/softhca-engine; do
    [ -x "$work/stage/$part" ] || fail "not installed: $part"
done
libdir=$(dirname "$(find "$work/stage" -name 'libsofthca-rdmav34.so' | head -1)")
[ -f "$libdir/libsofthca-preload.so" ] || fail "no provider and preload library under lib"
mv "$work/stage" "$work/moved"
installed="$work/moved/bin/softhca"
libdir=${libdir/$work\/stage/$work\/moved}
cd /
"$installed" up >/dev/null || fail "installed softhca up failed"
driver=$(cat "/etc/libibverbs.d/$SOFTHCA_PREFIX.driver")
[ "$driver" = "driver $libdir/libsofthca" ] || fail "driver file: '$driver', not $libdir"
exe=$(readlink "/proc/$(engine_pid)/exe")
[ "$exe" = "$work/moved/libexec/softhca/softhca-engine" ] || fail "the engine running is $exe"
"$installed" env | grep -qF "LD_PRELOAD=$libdir/libsofthca-preload.so" ||
    fail "env names another preload library: $("$installed" env)"
"$installed" exec -- ibv_devinfo -d "${SOFTHCA_PREFIX}0" | grep -q "PORT_ACTIVE" ||
    fail "ibv_devinfo through the installed softhca"
port=$(free_port)
"$installed" exec -- timeout 60 ib_write_bw -d "${SOFTHCA_PREFIX}0" -p "$port" -n 200 >/dev/null 2>&1 &
server=$!
wait_listening "$port" || fail "ib_write_bw server did not start"
out=$("$installed" exec -- timeout 60 ib_write_bw -d "${SOFTHCA_PREFIX}1" -p "$port" -n 200 127.0.0.1 2>&1) ||
    fail "ib_write_bw through the installed softhca: $out"
wait "$server" || fail "ib_write_bw server"
echo "ib_write_bw: $(grep -E '^ +65536 ' <<<"$out")"
"$installed" down >/dev/null || fail "installed softhca down failed"
installed=
[ ! -e "/etc/libibverbs.d/$SOFTHCA_PREFIX.driver" ] || fail "driver file left behind"
echo PASS
