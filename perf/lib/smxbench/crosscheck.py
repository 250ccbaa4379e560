"""The same configuration driven by postfix's smtp-source and smtp-sink, as
an independent check of our own tools' msgs/s."""
import json
import subprocess
import time

from .env import free_port, log, wait_port
from .runner import children_cpu_seconds, smtp_source_args


def smtp_source(port, n, sessions, size):
    """Runs postfix's smtp-source; returns its start time and its CPU seconds."""
    t0 = time.time()
    cpu0 = children_cpu_seconds()
    subprocess.run(smtp_source_args(port, sessions, n, size),
                   check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
    return t0, children_cpu_seconds() - cpu0


def messages(sessions):
    """Enough messages that each session sends several: at 2 per session the
    first connects and the last stragglers would dominate the time."""
    return max(2000, 6 * sessions)


def run(bench, systems, session_counts=(100,), size=1024):
    out = []
    for sessions in session_counts:
        n = messages(sessions)
        for s in systems:
            if s.name not in ("direct", "smx", "postfix", "sendmail"):
                continue  # the TLS and pinned variants: the plain run suffices
            bench.sink.arm(n)
            t0, cpu = smtp_source(s.port, n, sessions, size)
            done, complete = bench.sink.wait(120 + n / 50)
            secs = done.get("t_now", time.time()) - t0
            out.append({"path": "smtp-source → %s → smx-sink" % s.name if s.relay else "smtp-source → smx-sink",
                        "tool": "smtp-source", "sessions": sessions, "msgs": n if complete else 0,
                        "seconds": secs, "msgs_per_s": n / secs if complete else 0,
                        "source_cpu_s_per_1000": cpu / n * 1000})
            log("cross-check %s, %d sessions: %.0f msgs/s" % (out[-1]["path"], sessions, out[-1]["msgs_per_s"]))
    sessions, n = 100, messages(100)
    # And our source against postfix's sink.
    port = free_port()
    sink = subprocess.Popen(["smtp-sink", "-u", "nobody", "127.0.0.1:%d" % port, "1024"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if wait_port(port, 10):
            res = subprocess.run([bench.source, "--port", str(port), "-s", str(sessions), "-n", str(n),
                                  "-S", str(size)], capture_output=True, text=True, timeout=600)
            j = json.loads(res.stdout.strip().splitlines()[-1])
            out.append({"path": "smx-source → smtp-sink", "tool": "smx-source", "sessions": sessions,
                        "msgs": j["msgs"],
                        "seconds": j["seconds"], "msgs_per_s": j["msgs_per_s"]})
            log("cross-check smx-source → smtp-sink: %.0f msgs/s" % j["msgs_per_s"])
    finally:
        sink.terminate()
        sink.wait()
    return out
