"""Issue 11: idle connections cost little and do not slow anyone down. An
idle session holds no read buffer (libsm/smtp_io), so thousands of them fit
in a few KB each, and a new client is still greeted at once."""
import json
import os
import resource
import selectors
import socket
import subprocess
import time

from conftest import BUILD, SANITIZED, send, wait_until
from test_hostile_client import rss_kb
from test_smtp import Raw

IDLE = 2000


def open_idle(port, n, timeout=60):
    """n connections from 127.0.0.2 and .3, each having read its 220."""
    sel = selectors.DefaultSelector()
    socks, greeted, pending = [], 0, 0
    deadline = time.monotonic() + timeout
    while (len(socks) < n or pending) and time.monotonic() < deadline:
        while len(socks) < n and pending < 200:
            s = socket.socket()
            s.bind(("127.0.0.%d" % (2 + len(socks) % 2), 0))
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            sel.register(s, selectors.EVENT_READ)
            socks.append(s)
            pending += 1
        for key, _ in sel.select(timeout=1.0):
            sel.unregister(key.fileobj)
            pending -= 1
            try:
                greeted += key.fileobj.recv(512).startswith(b"220")
            except OSError:
                pass
    sel.close()
    return socks, greeted


def test_thousands_of_idle_connections_are_cheap_and_a_new_client_is_served(sink, make_relay):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    relay = make_relay(sink.port, "[server]\nmax_connections = %d\n" % (IDLE + 100))
    smtps = relay.child_pids("smx-smtps")[0]
    send(relay.port, "a@client.test", ["warm@example.com"], b"Subject: warm\r\n\r\nup\r\n")
    before = rss_kb(smtps)
    socks = []
    try:
        socks, greeted = open_idle(relay.port, IDLE)
        assert greeted == IDLE
        time.sleep(0.5)
        per_conn_kb = (rss_kb(smtps) - before) / IDLE
        # Issue 11's bound. About 6.6 KB in a release build (the reader's 2 KiB
        # first-read array included); 20 KB each when every waiting session
        # held a 16 KiB read buffer. Under AddressSanitizer (redzones around
        # each allocation) about 18 KB since the sessions hold their client
        # checks, limits and restrictions (issue 28).
        assert per_conn_kb < (24 if SANITIZED else 12), per_conn_kb
        greet_ms = []
        for _ in range(3):
            t0 = time.monotonic()
            c = Raw(relay.port)
            greet_ms.append((time.monotonic() - t0) * 1000)
            assert c.greeting.startswith("220"), c.greeting
            c.close()
        assert min(greet_ms) < 100, greet_ms
        send(relay.port, "a@client.test", ["b@example.com"], b"Subject: busy\r\n\r\nhello\r\n")
        wait_until(lambda: sink.count() == 2, 30, "the message at the sink")
        # The idle ones are still served: one of them sends a message too.
        s = socks[IDLE // 2]
        s.setblocking(True)
        s.settimeout(10)
        f = s.makefile("rb")
        for cmd, want in ((b"EHLO idle.test", b"250 "), (b"MAIL FROM:<c@client.test>", b"250"),
                          (b"RCPT TO:<d@example.com>", b"250"), (b"DATA", b"354"),
                          (b"Subject: idle\r\n\r\nawake\r\n.", b"250")):
            s.sendall(cmd + b"\r\n")
            line = f.readline()
            while line[3:4] == b"-":
                line = f.readline()
            assert line.startswith(want), (cmd, line)
        wait_until(lambda: sink.count() == 3, 30, "the idle client's message at the sink")
    finally:
        for s in socks:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_perf_idle_conns_measures_and_cleans_up(tmp_path):
    tool = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                        "perf", "idle-conns")
    out = tmp_path / "idle"
    r = subprocess.run([tool, "--build", BUILD, "--conns", "300", "--probes", "2", "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads((out / "run.json").read_text())["results"][0]
    assert res["greeted"] == 300 and res["failed"] == 0
    assert len(res["greeting_ms"]) == 2 and len(res["transaction_ms"]) == 2
    assert "| 300 | 300 | 0 |" in (out / "results.md").read_text()
