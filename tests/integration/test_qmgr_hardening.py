"""Issue 8, QMGR's side: over-size records refused per request, the metrics
port under a flood of slow clients, deliveries reclaimed from a stuck SMTPC,
and the switches that limit backscatter."""
import os
import signal
import socket
import struct
import time
import urllib.request

from conftest import PROTOCOL_VERSION, free_port, send, wait_until

MAX_BODY = 4 << 20
HELLO, HELLO_ACK, TA_COMMIT, TA_ACK = 1, 2, 10, 11


def field(tag, value):
    return struct.pack(">HI", tag, len(value)) + value


def frame(rtype, req_id, body):
    return struct.pack(">IHHQ", len(body), rtype, 0, req_id) + body


class Peer:
    """A raw record-protocol peer on qmgr.sock (what a broken SMTPS could send)."""

    def __init__(self, path, role):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(20)
        self.s.connect(path)
        self.s.sendall(frame(HELLO, 0, field(1, role.encode()) + field(2, struct.pack(">I", PROTOCOL_VERSION)) +
                             field(3, struct.pack(">I", os.getpid()))))
        rtype, _, fields = self.read()
        assert rtype == HELLO_ACK and fields[4] == struct.pack(">I", 0), fields

    def recv_exact(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.s.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf

    def read(self):
        """(type, req_id, {tag: value}) of the next frame, or None at EOF."""
        hdr = self.recv_exact(16)
        if hdr is None:
            return None
        length, rtype, _, req_id = struct.unpack(">IHHQ", hdr)
        body = self.recv_exact(length) if length else b""
        fields, off = {}, 0
        while off < len(body):
            tag, n = struct.unpack(">HI", body[off:off + 6])
            fields[tag] = body[off + 6:off + 6 + n]
            off += 6 + n
        return rtype, req_id, fields

    def send_oversize(self, rtype, req_id, length):
        self.s.sendall(struct.pack(">IHHQ", length, rtype, 0, req_id))
        chunk = b"x" * 65536
        left = length
        while left:
            self.s.sendall(chunk[:min(left, len(chunk))])
            left -= min(left, len(chunk))


def test_oversize_record_is_refused_for_that_request_only(sink, make_relay):
    relay = make_relay(sink.port)
    peer = Peer(os.path.join(relay.run_dir, "qmgr.sock"), "smtps")
    for req in (77, 78):
        peer.send_oversize(TA_COMMIT, req, MAX_BODY + 1)
        rtype, req_id, fields = peer.read()
        assert (rtype, req_id) == (TA_ACK, req), (rtype, req_id)
        assert fields[4] == struct.pack(">I", 2), fields  # reject
        assert b"too large" in fields[5]
    # A length no real record can have: the stream is out of step, dropped.
    peer.s.sendall(struct.pack(">IHHQ", 1 << 30, TA_COMMIT, 0, 79))
    assert peer.read() is None
    # Logged by QMGR's log thread, maybe a moment after the close.
    wait_until(lambda: "stream out of step" in relay.log_text(), 10, "the log line")
    # The real SMTPS link and mail flow were never touched.
    send(relay.port, "a@client.test", ["b@example.net"], b"Subject: after\r\n\r\nok\r\n")
    wait_until(lambda: sink.count() == 1, 30, "the message")
    assert relay.stats()["commit_rejected"] == 2


def http_get(port, timeout=10):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=timeout) as r:
        return r.read().decode()


def test_metrics_flood_does_not_hurt_mail_flow(sink, make_relay):
    mport = free_port()
    relay = make_relay(sink.port, '[stats]\nlisten = "127.0.0.1:%d"' % mport)
    assert "smx_received" in http_get(mport)
    qmgr = relay.child_pids("smx-qmgr")
    # 300 clients that send half a request and never finish it.
    slow = []
    for _ in range(300):
        s = socket.create_connection(("127.0.0.1", mport), timeout=10)
        s.sendall(b"GET /metr")
        slow.append(s)
    try:
        nfd = len(os.listdir("/proc/%d/fd" % qmgr[0]))
        assert nfd < 150, "qmgr holds %d descriptors" % nfd
        send(relay.port, "a@client.test", ["b@example.net"], b"Subject: flood\r\n\r\nok\r\n")
        wait_until(lambda: sink.count() == 1, 30, "mail during the flood")
        assert relay.stats()["received"] == 1
        # Each slow request is cut at its deadline; then a scrape works again.
        assert "smx_received_total 1" in wait_until(lambda: try_get(mport), 20, "a scrape")
    finally:
        for s in slow:
            s.close()
    assert relay.child_pids("smx-qmgr") == qmgr
    assert relay.log_text().count("accept") < 20  # no accept-error storm


def try_get(port):
    try:
        return http_get(port, timeout=2)
    except OSError:
        return None


def test_delivery_held_by_a_stuck_smtpc_is_reclaimed(sink, make_relay):
    relay = make_relay(sink.port, "[queue]\nmax_delivery_time = 2\n[client]\ndelivery_timeout = 1")
    smtpc = relay.child_pids("smx-smtpc")[0]
    # Stopped before it reached QMGR, it would hold no delivery to reclaim.
    wait_until(lambda: "smtpc[%d]: connected" % smtpc in relay.log_text(), 20,
               "smtpc to connect to qmgr")
    os.kill(smtpc, signal.SIGSTOP)
    try:
        send(relay.port, "a@client.test", ["stuck@example.net"], b"Subject: stuck\r\n\r\nok\r\n")
        wait_until(lambda: "reclaimed: smtpc gave no result" in relay.log_text(), 20,
                   "the delivery to be reclaimed")
        assert "deferred" in relay.smx("queue").stdout
    finally:
        os.kill(smtpc, signal.SIGCONT)
    wait_until(lambda: sink.count() >= 1, 60, "the message after the reclaim")
    time.sleep(1)
    assert sink.count() <= 2


def test_soft_bounce_retries_instead_of_bouncing(make_sink, make_relay):
    sink = make_sink("--permfail", "^bad")
    relay = make_relay(sink.port, "[queue]\nsoft_bounce = true")
    send(relay.port, "s@client.test", ["bad@example.net"], b"Subject: soft\r\n\r\nx\r\n")
    wait_until(lambda: "deferred" in relay.smx("queue").stdout, 20, "a deferral")
    time.sleep(3)  # several retries (retry_min 1 s): still no DSN
    assert sink.count() == 0
    assert relay.stats()["bounced"] == 0
    assert "550" in relay.smx("queue").stdout


def test_no_dsn_for_mail_from_outside_when_bounce_untrusted_is_off(make_sink, make_relay):
    sink = make_sink("--permfail", "^bad")
    # 127.0.0.1 is outside relay_networks: the test client is an outside one.
    relay = make_relay(sink.port, '[server]\nrelay_networks = ["192.0.2.0/24"]\n'
                                  'relay_domains = ["example.net"]\n'
                                  "[queue]\nbounce_untrusted = false")
    send(relay.port, "forged@victim.test", ["bad@example.net", "good@example.net"],
         b"Subject: bs\r\n\r\nx\r\n")
    wait_until(lambda: relay.stats()["bounced"] == 1, 30, "the bounce")
    wait_until(lambda: "no bounce: client outside relay_networks" in relay.log_text(), 10,
               "the log line")
    time.sleep(1)
    msgs = sink.messages()
    assert [m["from"] for m in msgs] == ["forged@victim.test"], msgs  # no DSN
    assert relay.stats()["dsn_sent"] == 0


def test_dsn_for_mail_from_outside_by_default_carries_headers_only(make_sink, make_relay):
    sink = make_sink("--permfail", "^bad")
    relay = make_relay(sink.port, '[server]\nrelay_networks = ["192.0.2.0/24"]\n'
                                  'relay_domains = ["example.net", "victim.test"]')
    send(relay.port, "s@victim.test", ["bad@example.net"],
         b"Subject: bs\r\nX-Marker: head\r\n\r\nSECRET BODY LINE\r\n")
    wait_until(lambda: sink.count() == 1, 30, "the DSN")
    dsn = sink.messages()[0]
    assert dsn["from"] == "" and dsn["rcpts"] == ["s@victim.test"]
    assert b"X-Marker: head" in dsn["data"] and b"SECRET BODY LINE" not in dsn["data"]
