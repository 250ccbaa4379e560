"""Per-client limits ([anvil], server.max_connections_per_client), counted
by QMGR's anvil for every SMTPS event loop and process: each limit is hit
at exactly its number from one client address (127.0.0.2) while another
(127.0.0.3) is not limited by it; exempt networks, limits of 0, and a QMGR
killed in the middle (the counts start again with the new QMGR).

127.0.0.1 is the only trusted address here (relay_networks), so that
127.0.0.2 and 127.0.0.3 are counted. The rate window is long (10 minutes):
nothing here depends on timing, only on counts."""
import os
import re
import signal
import socket

from conftest import Raw, wait_until
from test_processes import smtps_pids

HOST = "smx.test"
BASE = ('[server]\nrelay_networks = ["127.0.0.1/32"]\nrelay_domains = ["b.test"]\n'
        '[anvil]\nrate_time_unit = "10m"\n')


class Client(Raw):
    """Raw, its connection coming from a given loopback address."""

    def __init__(self, port, source):  # pylint: disable=super-init-not-called
        self.s = socket.create_connection(("127.0.0.1", port), timeout=10,
                                          source_address=(source, 0))
        self.buf = b""
        self.greeting = self.reply()


def greeted(port, source):
    c = Client(port, source)
    g = c.greeting
    if g.startswith("220"):
        assert c.cmd("QUIT").startswith("221")
    c.close()
    return g


def session(port, source):
    c = Client(port, source)
    assert c.greeting.startswith("220"), c.greeting
    assert c.cmd("EHLO client.test").startswith("250")
    return c


def refusals(relay):
    """smx stats' refusal counts by "class_reason", once SMTPS reported them."""
    return {k[len("rejected_"):]: v for k, v in relay.stats().items()
            if k.startswith("rejected_")}


def too_many_connections(ip):
    return "421 4.7.0 %s Error: too many connections from %s" % (HOST, ip)


def test_connection_rate_limit_per_address(sink, make_relay):
    relay = make_relay(sink.port, BASE + "connection_rate_limit = 3\n")
    for _ in range(3):
        assert greeted(relay.port, "127.0.0.2").startswith("220")
    assert greeted(relay.port, "127.0.0.2") == too_many_connections("127.0.0.2")
    # Refused ones count too (postfix's anvil): still refused.
    assert greeted(relay.port, "127.0.0.2") == too_many_connections("127.0.0.2")
    for _ in range(3):
        assert greeted(relay.port, "127.0.0.3").startswith("220")
    # 127.0.0.1 is in relay_networks: exempt, however often it comes.
    for _ in range(5):
        assert greeted(relay.port, "127.0.0.1").startswith("220")
    log = relay.log_matching(r"smtpd\[\d+\]: warning: Connection rate limit exceeded: 4 from "
                             r"unknown\[127\.0\.0\.2\] for service smtp",
                             r"Connection rate limit exceeded: 5 from unknown\[127\.0\.0\.2\]")
    assert "from unknown[127.0.0.3] for service" not in log
    wait_until(lambda: refusals(relay).get("4xx_connection_rate") == 2, 10,
               "two connection-rate refusals in smx stats")


def test_max_connections_per_client_holds_across_processes(sink, make_relay):
    relay = make_relay(sink.port, BASE.replace(
        "[server]\n", "[server]\nprocesses = 2\nthreads = 1\nmax_connections_per_client = 3\n"))
    pids = smtps_pids(relay, 2)
    relay.wait_probes_ended()
    held = {ip: [Client(relay.port, ip) for _ in range(12)] for ip in ("127.0.0.2", "127.0.0.3")}
    for ip, clients in held.items():
        ok = [c for c in clients if c.greeting.startswith("220")]
        assert len(ok) == 3, [c.greeting for c in clients]
        assert all(c.greeting == too_many_connections(ip) for c in clients if c not in ok)
    # The connections went to both processes (by a hash of the source port;
    # all 24 in one has a chance of 2^-23): the limit is of both together.
    log = relay.log_matching(r"warning: Connection concurrency limit exceeded: 4 from "
                             r"unknown\[127\.0\.0\.2\] for service smtp")
    took = set(re.findall(r"smtpd\[(\d+)\]: connect from unknown\[127\.0\.0\.[23]\]", log))
    assert took == {str(p) for p in pids}, (took, pids)
    # One that ends makes room for one more, whichever process takes it.
    first = next(c for c in held["127.0.0.2"] if c.greeting.startswith("220"))
    assert first.cmd("QUIT").startswith("221")
    first.close()
    wait_until(lambda: greeted(relay.port, "127.0.0.2").startswith("220"), 10,
               "a place for 127.0.0.2 again")
    for clients in held.values():
        for c in clients:
            c.close()


def test_message_rate_limit_per_address(sink, make_relay):
    relay = make_relay(sink.port, BASE + "message_rate_limit = 3\n")
    a = session(relay.port, "127.0.0.2")
    for _ in range(3):
        assert a.cmd("MAIL FROM:<s@a.test>").startswith("250")
        assert a.cmd("RSET").startswith("250")
    assert a.cmd("MAIL FROM:<s@a.test>") == "450 4.7.1 Error: too much mail from 127.0.0.2"
    # Counted per client, not per session.
    b = session(relay.port, "127.0.0.2")
    assert b.cmd("MAIL FROM:<s@a.test>") == "450 4.7.1 Error: too much mail from 127.0.0.2"
    c = session(relay.port, "127.0.0.3")
    for _ in range(3):
        assert c.cmd("MAIL FROM:<s@a.test>").startswith("250")
        assert c.cmd("RSET").startswith("250")
    for x in (a, b, c):
        x.close()
    relay.log_matching(r"warning: Message delivery request rate limit exceeded: 4 from "
                       r"unknown\[127\.0\.0\.2\] for service smtp",
                       r"NOQUEUE: reject: MAIL from unknown\[127\.0\.0\.2\]: 450 4\.7\.1 Error: "
                       r"too much mail from 127\.0\.0\.2; proto=ESMTP helo=<client\.test>")
    wait_until(lambda: refusals(relay).get("4xx_message_rate") == 2, 10,
               "two message-rate refusals in smx stats")


def test_recipient_rate_limit_per_address(sink, make_relay):
    relay = make_relay(sink.port, BASE + "recipient_rate_limit = 4\n")
    a = session(relay.port, "127.0.0.2")
    assert a.cmd("MAIL FROM:<s@a.test>").startswith("250")
    for r in ("r1", "r2", "r3"):
        assert a.cmd("RCPT TO:<%s@b.test>" % r).startswith("250")
    assert a.cmd("DATA").startswith("354")
    assert a.cmd("Subject: x\r\n\r\nbody\r\n.").startswith("250")
    a.close()
    b = session(relay.port, "127.0.0.2")
    assert b.cmd("MAIL FROM:<s@a.test>").startswith("250")
    assert b.cmd("RCPT TO:<r4@b.test>").startswith("250")
    assert b.cmd("RCPT TO:<r5@b.test>") == "450 4.7.1 Error: too many recipients from 127.0.0.2"
    c = session(relay.port, "127.0.0.3")
    assert c.cmd("MAIL FROM:<s@a.test>").startswith("250")
    for r in ("r1", "r2", "r3", "r4"):
        assert c.cmd("RCPT TO:<%s@b.test>" % r).startswith("250")
    assert c.cmd("RCPT TO:<r5@b.test>").startswith("450 4.7.1")
    for x in (b, c):
        x.close()
    # The reject line is keyed by the queue id once a recipient was taken, as postfix's.
    relay.log_matching(r"warning: Recipient address rate limit exceeded: 5 from "
                       r"unknown\[127\.0\.0\.2\] for service smtp",
                       r"[0-9A-F]+: reject: RCPT from unknown\[127\.0\.0\.2\]: 450 4\.7\.1 Error: "
                       r"too many recipients from 127\.0\.0\.2; from=<s@a\.test> to=<r5@b\.test> "
                       r"proto=ESMTP helo=<client\.test>")
    wait_until(lambda: sink.count() == 1, 30, "the message of 3 recipients at the sink")


def test_an_exempt_network_is_not_limited(sink, make_relay):
    relay = make_relay(sink.port, BASE + 'connection_rate_limit = 1\nmessage_rate_limit = 1\n'
                                         'exceptions = ["127.0.0.3/32"]\n')
    for _ in range(5):
        assert greeted(relay.port, "127.0.0.3").startswith("220")
    c = session(relay.port, "127.0.0.3")
    for _ in range(5):
        assert c.cmd("MAIL FROM:<s@a.test>").startswith("250")
        assert c.cmd("RSET").startswith("250")
    c.close()
    assert greeted(relay.port, "127.0.0.2").startswith("220")
    assert greeted(relay.port, "127.0.0.2") == too_many_connections("127.0.0.2")
    # relay_networks stop being exempt with exempt_relay_networks = false (a
    # message rate: smx run's own probes from 127.0.0.1 only connect).
    relay.stop()
    second = os.path.join(relay.tmp, "second")
    os.makedirs(second)
    relay2 = make_relay(sink.port, BASE.replace('"127.0.0.1/32"', '"127.0.0.0/8"') +
                        "message_rate_limit = 1\nexempt_relay_networks = false\n", tmp=second)
    c = session(relay2.port, "127.0.0.2")
    assert c.cmd("MAIL FROM:<s@a.test>").startswith("250")
    assert c.cmd("RSET").startswith("250")
    assert c.cmd("MAIL FROM:<s@a.test>") == "450 4.7.1 Error: too much mail from 127.0.0.2"
    c.close()


def test_limits_of_zero_limit_nothing(sink, make_relay):
    relay = make_relay(sink.port, BASE.replace(
        "[server]\n", "[server]\nmax_connections_per_client = 0\n") +
        "connection_rate_limit = 0\nmessage_rate_limit = 0\nrecipient_rate_limit = 0\n")
    held = [Client(relay.port, "127.0.0.2") for _ in range(60)]
    assert all(c.greeting.startswith("220") for c in held)
    c = session(relay.port, "127.0.0.2")
    for _ in range(30):
        assert c.cmd("MAIL FROM:<s@a.test>").startswith("250")
        assert c.cmd("RCPT TO:<r@b.test>").startswith("250")
        assert c.cmd("RSET").startswith("250")
    c.close()
    for h in held:
        h.close()
    # Nothing was asked of QMGR: it tracks no client.
    assert relay.stats()["anvil_clients"] == 0


def test_qmgr_killed_the_counts_start_again_with_the_new_one(sink, make_relay):
    """SMTPS cannot take mail without QMGR: when QMGR dies, smx-smtps ends
    too and smx run starts both again. The new QMGR's anvil starts from
    zero (postfix's anvil, restarted, does the same) and limits again."""
    relay = make_relay(sink.port, BASE + "connection_rate_limit = 2\n")
    for _ in range(2):
        assert greeted(relay.port, "127.0.0.2").startswith("220")
    assert greeted(relay.port, "127.0.0.2") == too_many_connections("127.0.0.2")
    qmgr = relay.child_pids("smx-qmgr")
    smtps = relay.child_pids("smx-smtps")
    os.kill(qmgr[0], signal.SIGKILL)
    wait_until(lambda: (q := relay.child_pids("smx-qmgr")) and q != qmgr and
               (s := relay.child_pids("smx-smtps")) and not set(s) & set(smtps), 60,
               "a new QMGR and smx-smtps")
    wait_until(relay.greets, 30, "smx to answer again")
    assert greeted(relay.port, "127.0.0.2").startswith("220")
    assert greeted(relay.port, "127.0.0.2").startswith("220")
    assert greeted(relay.port, "127.0.0.2") == too_many_connections("127.0.0.2")
    assert greeted(relay.port, "127.0.0.3").startswith("220")
