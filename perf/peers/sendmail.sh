#!/bin/sh
# Private sendmail 8.17 instance for the relay benchmark. Debian's
# sendmail-bin conflicts with postfix, so its packages are only downloaded
# and unpacked (dpkg -x) under PREFIX; nothing is installed system-wide.
#   sendmail.sh install PREFIX                 download + unpack once
#   sendmail.sh setup PREFIX DIR PORT SINK_PORT generate .cf, create queue
#   sendmail.sh start PREFIX DIR | stop PREFIX DIR
#   sendmail.sh pids PREFIX DIR                 daemon PID and its children
#   sendmail.sh version PREFIX
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cmd=${1:?usage: sendmail.sh install|setup|start|stop|pids|version PREFIX ...}
prefix=${2:?PREFIX}
root=$prefix/root
bin=$root/usr/libexec/sendmail/sendmail
export LD_LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu:$root/lib/x86_64-linux-gnu"

# Runs sendmail in a private UTS namespace with a qualified hostname: with
# the machine's unqualified one it sleeps about 60 s trying to qualify it.
# The machine's own hostname is never changed.
in_ns() { unshare --uts sh -c 'hostname relay-sendmail.perf.example && exec "$@"' sh "$bin" "$@"; }

. "$here/pidfile.sh"

case "$cmd" in
install)
    [ -x "$bin" ] && exit 0
    mkdir -p "$prefix/debs" "$root"
    # libwrap0: sendmail-bin links it and it may be missing here.
    (cd "$prefix/debs" && apt-get download sendmail-bin sendmail-base sendmail-cf m4 libwrap0 2>&1 \
        | grep -v '^W: Download is performed unsandboxed' || true)
    for deb in "$prefix"/debs/*.deb; do dpkg -x "$deb" "$root"; done
    # Our copy runs as root: without set-gid the loader honours
    # LD_LIBRARY_PATH, which finds the unpacked libwrap.
    chmod g-s "$bin"
    [ -x "$bin" ]
    ;;
setup)
    dir=$3 port=$4 sink=$5
    mkdir -p "$dir/etc" "$dir/mqueue"
    chmod 700 "$dir/mqueue"
    : > "$dir/etc/statistics"
    : > "$dir/etc/aliases"
    : > "$dir/etc/local-host-names"
    printf '127.0.0.1 localhost relay-sendmail.perf.example\n' > "$dir/etc/hosts"
    printf 'hosts files\naliases files\n' > "$dir/etc/service.switch"
    cf=$root/usr/share/sendmail/cf
    sed -e "s|@DIR@|$dir|g" -e "s|@PORT@|$port|g" -e "s|@SINK_PORT@|$sink|g" -e "s|@CF@|$cf|g" \
        "$here/sendmail/relay.mc.in" > "$dir/relay.mc"
    "$root/usr/bin/m4" -D_CF_DIR_="$cf/" "$dir/relay.mc" > "$dir/sendmail.cf"
    in_ns -C "$dir/sendmail.cf" -bi >/dev/null 2>&1 || true   # aliases.db from the empty list
    ;;
start)
    in_ns -C "$3/sendmail.cf" -bd -q1m
    await_pid "$3/sendmail.pid"
    ;;
stop)
    stop_pid "$3/sendmail.pid"
    ;;
pids)
    tree_pids "$3/sendmail.pid"
    ;;
version)
    in_ns -d0.1 -bt < /dev/null 2>/dev/null | sed -n 's/^Version \(.*\)/\1/p' | head -1
    ;;
*) echo "sendmail.sh: unknown command $cmd" >&2; exit 2 ;;
esac
