# Sourced by postfix.sh and sendmail.sh: a peer daemon is known by the PID
# in its own pid file only; nothing is ever found or killed by name.

# pid_of FILE: the PID in FILE's first line, or nothing.
pid_of() { [ -f "$1" ] && head -1 "$1" | tr -d ' ' || true; }

# await_pid FILE: true once FILE holds a PID (up to 10 s).
await_pid() {
    i=0; while [ -z "$(pid_of "$1")" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
    [ -n "$(pid_of "$1")" ]
}

# stop_pid FILE: SIGTERM to that PID, wait up to 10 s, remove FILE.
stop_pid() {
    pid=$(pid_of "$1")
    if [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null; then
        i=0; while kill -0 "$pid" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
    fi
    rm -f "$1"
}

# tree_pids FILE: the daemon's PID and its children's.
tree_pids() {
    pid=$(pid_of "$1")
    [ -n "$pid" ] && { echo "$pid"; ps -o pid= --ppid "$pid" || true; }
}
