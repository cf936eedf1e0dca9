#!/usr/bin/env bash
# The Debian package: built by tools/build-deb.sh (CPack, its own build directory for
# /usr), its control data (name, dependencies from dpkg-shlibdeps, conffile, maintainer
# scripts) and contents checked, installed on this machine with `apt-get install ./deb`,
# used from the installed files (softhca up, ibv_devinfo, ib_write_bw, status --json),
# its systemd unit verified (systemd-analyze verify, where there is one) and run as
# systemd would run it (EnvironmentFile, ExecStart, PIDFile, ExecStop; the instance's
# prefix in place of "softhca", so that a user's own instance is left alone), then
# purged: nothing of it stays.
#   test_package.sh
source "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
work=$(mktemp -d)
installed=
cleanup() {
    if [ -n "$installed" ]; then
        /usr/bin/softhca down >/dev/null 2>&1 || true
        DEBIAN_FRONTEND=noninteractive apt-get purge -y -q softhca >/dev/null 2>&1 || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
if dpkg-query -W -f='${Status}' softhca 2>/dev/null | grep -q "install ok installed"; then
    fail "a softhca package is installed on this machine already: the test would replace it"
fi

# SOFTHCA_DEB_BUILD: a build directory to use (built there incrementally); a fresh one
# by default.
deb=$("$repo/tools/build-deb.sh" "${SOFTHCA_DEB_BUILD:-$work/build}") ||
    fail "tools/build-deb.sh failed"
echo "built $(basename "$deb")"
info=$(dpkg-deb -f "$deb" Package Version Architecture Depends Recommends)
grep -q "^Package: softhca$" <<<"$info" || fail "package name: $info"
for dep in libibverbs1 librte-ethdev liburing libisal; do
    grep -q "^Depends:.*$dep" <<<"$info" || fail "Depends lacks $dep: $info"
done
dpkg-deb -e "$deb" "$work/control"
grep -qx "/etc/softhca/softhca.conf" "$work/control/conffiles" || fail "conffiles: $(cat "$work/control/conffiles")"
for script in postinst prerm postrm; do
    [ -x "$work/control/$script" ] || fail "no $script"
done
contents=$(dpkg-deb -c "$deb" | awk '{print $6}')
for path in ./usr/bin/softhca ./usr/libexec/softhca/softhca-engine \
    ./usr/lib/systemd/system/softhca.service ./etc/softhca/softhca.conf \
    ./usr/share/doc/softhca/status.schema.json; do
    grep -qx "$path" <<<"$contents" || fail "the package lacks $path"
done
grep -qE '^\./usr/lib/.*softhca/libsofthca-rdmav34\.so$' <<<"$contents" || fail "no provider in the package"
dpkg-deb -x "$deb" "$work/tree"
for binary in usr/bin/softhca usr/libexec/softhca/softhca-engine; do
    ! readelf -S "$work/tree/$binary" | grep -qE '\.(debug_info|symtab)' ||
        fail "$binary is not stripped"
done
echo "control and contents: $(grep "^Depends" <<<"$info" | cut -c1-120)..."

# Every dependency is on this machine already (install-deps): apt installs only the package.
installed=1
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$deb" >"$work/apt.log" 2>&1 ||
    fail "apt-get install ./$(basename "$deb"): $(tail -20 "$work/apt.log")"
[ "$(command -v softhca)" = /usr/bin/softhca ] || fail "softhca is not /usr/bin/softhca"
cd /
/usr/bin/softhca up --prefix "$SOFTHCA_PREFIX" >/dev/null || fail "installed softhca up failed"
grep -qE "^driver /usr/lib/.*softhca/libsofthca$" "/etc/libibverbs.d/$SOFTHCA_PREFIX.driver" ||
    fail "driver file: $(cat "/etc/libibverbs.d/$SOFTHCA_PREFIX.driver")"
[ "$(readlink "/proc/$(engine_pid)/exe")" = /usr/libexec/softhca/softhca-engine ] ||
    fail "not the installed engine"
/usr/bin/softhca exec --prefix "$SOFTHCA_PREFIX" -- ibv_devinfo -d "${SOFTHCA_PREFIX}0" |
    grep -q PORT_ACTIVE || fail "ibv_devinfo on the installed softhca"
port=$(free_port)
/usr/bin/softhca exec --prefix "$SOFTHCA_PREFIX" -- timeout 60 ib_write_bw -d "${SOFTHCA_PREFIX}0" \
    -p "$port" -n 200 >/dev/null 2>&1 &
server=$!
wait_listening "$port" || fail "ib_write_bw server did not start"
out=$(/usr/bin/softhca exec --prefix "$SOFTHCA_PREFIX" -- timeout 60 ib_write_bw \
    -d "${SOFTHCA_PREFIX}1" -p "$port" -n 200 127.0.0.1 2>&1) || fail "ib_write_bw: $out"
wait "$server" || fail "ib_write_bw server failed"
echo "installed: ib_write_bw $(grep -E '^ +65536 ' <<<"$out")"
/usr/bin/softhca status --prefix "$SOFTHCA_PREFIX" --json | python3 -c 'import json, sys; json.load(sys.stdin)' ||
    fail "status --json of the installed softhca"
/usr/bin/softhca down --prefix "$SOFTHCA_PREFIX" >/dev/null || fail "installed softhca down"

unit=/usr/lib/systemd/system/softhca.service
if command -v systemd-analyze >/dev/null; then
    systemd-analyze verify "$unit" 2>&1 | grep -v "^$" | tee "$work/verify.log" || true
    [ ! -s "$work/verify.log" ] || fail "systemd-analyze verify: $(cat "$work/verify.log")"
    echo "systemd-analyze verify: clean"
else
    echo "systemd-analyze not here: the unit is checked by running its commands only"
fi
# As systemd runs it: the EnvironmentFile's variables, ExecStart (it forks; systemd then
# reads PIDFile), softhca status against it, ExecStop.
field() { sed -n "s/^$1=//p" "$unit" | sed "s/--prefix softhca/--prefix $SOFTHCA_PREFIX/; s|/run/softhca/softhca/|/run/softhca/$SOFTHCA_PREFIX/|"; }
env_file=$(field EnvironmentFile)
env_file=${env_file#-}
[ "$env_file" = /etc/softhca/softhca.conf ] || fail "EnvironmentFile $env_file"
printf 'SOFTHCA_UP_ARGS=--mtu 4200\n' >>"$env_file" # the administrator's option
(
    # EnvironmentFile: VARIABLE=value lines (the value to the end of the line, quotes
    # stripped), # comments; a later assignment wins.
    while IFS= read -r line; do
        [[ "$line" =~ ^[[:space:]]*(#|$) ]] && continue
        value=${line#*=}
        [[ "$value" =~ ^\"(.*)\"$ ]] && value=${BASH_REMATCH[1]}
        export "${line%%=*}=$value"
    done <"$env_file"
    # With the unit's capability bounding set and NoNewPrivileges, as systemd would
    # start it: the engine must work with only the capabilities the unit grants.
    bounding=-all
    for cap in $(field CapabilityBoundingSet); do
        cap=${cap#CAP_}
        bounding+=",+${cap,,}"
    done
    [ "$(field NoNewPrivileges)" = yes ] || fail "the unit does not set NoNewPrivileges"
    # shellcheck disable=SC2046 # systemd splits $VARIABLE into words as this does
    setpriv --bounding-set="$bounding" --inh-caps=-all --no-new-privs \
        bash -c "$(field ExecStart)" >/dev/null
) || fail "the unit's ExecStart failed"
pid_file=$(field PIDFile)
kill -0 "$(cat "$pid_file")" || fail "PIDFile $pid_file names no live engine"
/usr/bin/softhca status --prefix "$SOFTHCA_PREFIX" | grep -q " mtu 4200 " ||
    fail "the service did not take softhca.conf's options: $(/usr/bin/softhca status --prefix "$SOFTHCA_PREFIX")"
grep -q "^CapEff:" "/proc/$(cat "$pid_file")/status" &&
    [ "$(sed -n 's/^CapBnd:\s*//p' "/proc/$(cat "$pid_file")/status")" != 000001ffffffffff ] ||
    fail "the engine runs with every capability"
# A program's memory, private and shared, reached by the engine under those capabilities.
port=$(free_port)
/usr/bin/softhca exec --prefix "$SOFTHCA_PREFIX" -- \
    ibv_rc_pingpong -d "${SOFTHCA_PREFIX}0" -g 0 -p "$port" -n 20 >"$work/pp-server.log" 2>&1 &
pp_server=$!
wait_listening "$port" || fail "the pingpong server did not listen: $(cat "$work/pp-server.log")"
/usr/bin/softhca exec --prefix "$SOFTHCA_PREFIX" -- \
    ibv_rc_pingpong -d "${SOFTHCA_PREFIX}1" -g 0 -p "$port" -n 20 127.0.0.1 >"$work/pp-client.log" 2>&1 ||
    fail "ibv_rc_pingpong against the service failed: $(cat "$work/pp-client.log")"
wait "$pp_server" || fail "the pingpong server failed: $(cat "$work/pp-server.log")"
eval "$(field ExecStop)" >/dev/null || fail "the unit's ExecStop failed"
[ ! -e "$pid_file" ] || fail "the engine's pid file stayed"
echo "service: ExecStart with softhca.conf's options, status, ExecStop"

DEBIAN_FRONTEND=noninteractive apt-get purge -y -q softhca >"$work/apt.log" 2>&1 ||
    fail "apt-get purge softhca: $(tail -20 "$work/apt.log")"
installed=
for path in /usr/bin/softhca /usr/libexec/softhca "$unit" /etc/softhca /usr/share/doc/softhca; do
    [ ! -e "$path" ] || fail "$path stayed after purge"
done
! dpkg-query -W softhca >/dev/null 2>&1 || dpkg-query -W -f='${Status}' softhca | grep -q "not-installed" ||
    fail "dpkg still knows softhca: $(dpkg-query -W -f='${Status}' softhca)"
echo PASS
