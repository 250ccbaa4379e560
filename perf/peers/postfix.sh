#!/bin/sh
# Private postfix instance for the relay benchmark.
#   postfix.sh setup DIR PORT SINK_PORT [CERT KEY]
#                                         write configs, create the queue;
#                                         with CERT and KEY: STARTTLS in
#                                         (offered) and out (required)
#   postfix.sh policy DIR PORT RESOLV_CONF
#                                         after setup, relay-bench --policy:
#                                         the gateway policy (postfix/policy*.in;
#                                         the maps built in DIR/etc first) and
#                                         RESOLV_CONF as the instance's resolver
#   postfix.sh start DIR | stop DIR       start / stop (by the master's PID); with
#                                         a policy, in a private mount namespace
#                                         whose /etc/resolv.conf is RESOLV_CONF
#   postfix.sh pids DIR                   PIDs of the master and its children
#   postfix.sh version
# Needs the Debian postfix package (relay-bench installs it with the
# system instance left unconfigured and not started).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cmd=${1:?usage: postfix.sh setup|start|stop|pids|version ...}

. "$here/pidfile.sh"

case "$cmd" in
setup)
    dir=$2 port=$3 sink=$4 cert=${5:-} key=${6:-}
    mkdir -p "$dir/etc" "$dir/spool" "$dir/data"
    maillog="# maillog_file: off"
    [ "${PEER_LOG:-0}" = 1 ] && maillog="maillog_file = $dir/maillog"
    for f in main.cf master.cf; do
        sed -e "s|@DIR@|$dir|g" -e "s|@PORT@|$port|g" -e "s|@SINK_PORT@|$sink|g" \
            -e "s|@MAILLOG@|$maillog|" "$here/postfix/$f.in" > "$dir/etc/$f"
    done
    # postfix refuses a maillog_file outside maillog_file_prefixes (/var).
    [ "${PEER_LOG:-0}" = 1 ] && postconf -c "$dir/etc" -e "maillog_file_prefixes = $dir"
    if [ -n "$cert" ]; then
        cat "$here/postfix/tls.cf.in" >> "$dir/etc/main.cf"
        postconf -c "$dir/etc" -e "smtpd_tls_cert_file = $cert" "smtpd_tls_key_file = $key"
        cat "$here/postfix/tls-master.cf.in" >> "$dir/etc/master.cf"
    fi
    chown postfix "$dir/data"
    # Creates the queue subdirectories with postfix's own owners and modes.
    postfix -c "$dir/etc" set-permissions >/dev/null 2>&1 || true
    postfix -c "$dir/etc" check
    ;;
policy)
    dir=$2 port=$3
    postconf -c "$dir/etc" -e "mynetworks = 192.0.2.0/24"
    sed -e "s|@DIR@|$dir|g" "$here/postfix/policy.cf.in" >> "$dir/etc/main.cf"
    # postscreen takes the smtpd's place on the port.
    sed -i -e "/^127\.0\.0\.1:$port inet /d" "$dir/etc/master.cf"
    sed -e "s|@PORT@|$port|g" "$here/postfix/policy-master.cf.in" >> "$dir/etc/master.cf"
    cp "$4" "$dir/etc/resolv.conf"
    postfix -c "$dir/etc" check
    ;;
start)
    if [ -f "$2/etc/resolv.conf" ]; then
        # postfix's resolver has no port setting: master and every child
        # (dnsblog) see the policy's resolv.conf in a mount namespace of
        # their own, which lives as long as they do.
        unshare --mount --propagation private sh -c \
            'mount --bind "$1/etc/resolv.conf" /etc/resolv.conf && exec postfix -c "$1/etc" start' sh "$2"
    else
        postfix -c "$2/etc" start
    fi
    await_pid "$2/spool/pid/master.pid"
    ;;
stop)
    stop_pid "$2/spool/pid/master.pid"
    ;;
pids)
    tree_pids "$2/spool/pid/master.pid"
    ;;
version)
    postconf -d -h mail_version 2>/dev/null
    ;;
*) echo "postfix.sh: unknown command $cmd" >&2; exit 2 ;;
esac
