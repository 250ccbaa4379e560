"""End to end: smtplib clients → smx run → recording sink."""
import concurrent.futures
import random
import smtplib

from conftest import SCALE, send, strip_received, wait_until


def make_body(rng, size, n):
    """A CRLF message of about `size` bytes with dot-leading lines and 8-bit bytes."""
    head = ("From: a@client.test\r\nTo: b@example.net\r\nSubject: test %d\r\n"
            "Message-ID: <%d@client.test>\r\n\r\n" % (n, n)).encode()
    lines, total = [], len(head)
    while total < size:
        kind = rng.random()
        if kind < 0.05:
            line = b"." * rng.randint(1, 3) + b"dot line"
        elif kind < 0.08:
            line = b""
        elif kind < 0.10:
            line = bytes(rng.randint(0xa0, 0xff) for _ in range(20))
        else:
            line = bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz ") for _ in range(rng.randint(1, 200)))
        lines.append(line)
        total += len(line) + 2
    return head + b"\r\n".join(lines) + b"\r\n"


def test_1000_messages_50_sessions_arrive_exactly_once(sink, make_relay):
    relay = make_relay(sink.port)
    rng = random.Random(2526)
    n_msgs = max(50, int(1000 * SCALE))
    jobs = []
    for n in range(n_msgs):
        # mostly small, a few up to 1 MB (log-uniform from 100 B)
        size = int(100 * (10000 ** rng.random()))
        rcpts = ["r%d-%d@example.net" % (n, k) for k in range(rng.randint(1, 5))]
        jobs.append(("s%d@client.test" % n, rcpts, make_body(rng, size, n)))

    def session(chunk):
        with smtplib.SMTP("127.0.0.1", relay.port, timeout=120) as c:
            c.ehlo("client.test")
            for sender, rcpts, body in chunk:
                c.sendmail(sender, rcpts, body)

    chunks = [jobs[i::50] for i in range(50)]
    with concurrent.futures.ThreadPoolExecutor(50) as ex:
        for f in [ex.submit(session, c) for c in chunks]:
            f.result()

    wait_until(lambda: sink.count() >= n_msgs, 120, "all messages at the sink")
    got = {}
    for m in sink.messages():
        body, received = strip_received(m["data"])
        assert b"by smx.test" in received
        key = m["from"]
        assert key not in got, "duplicate delivery for %s" % key
        got[key] = (m["rcpts"], body)
    assert len(got) == n_msgs
    for sender, rcpts, body in jobs:
        assert sender in got, "lost message from %s" % sender
        got_rcpts, got_body = got[sender]
        assert sorted(got_rcpts) == sorted(rcpts)
        assert got_body == body, "message from %s not byte-exact" % sender

    # Once everything is delivered the queue is empty on disk too.
    wait_until(lambda: not relay.spool_files("cdb"), 30, "content files to be removed")
    stats = relay.stats()
    assert stats["received"] == n_msgs
    assert stats["delivered"] == sum(len(r) for _, r, _ in jobs)
    relay.stop()
    assert not relay.spool_files("ibdb"), relay.spool_files("ibdb")


def test_stats_show_group_commit(sink, make_relay):
    relay = make_relay(sink.port, "[queue]\ncommit_interval_us = 5000")
    body = b"Subject: x\r\n\r\nhello\r\n"

    def session(k):
        with smtplib.SMTP("127.0.0.1", relay.port, timeout=60) as c:
            for i in range(10):
                c.sendmail("g%d-%d@client.test" % (k, i), ["x@example.net"], body)

    with concurrent.futures.ThreadPoolExecutor(20) as ex:
        list(ex.map(session, range(20)))
    wait_until(lambda: sink.count() >= 200, 60, "200 messages at the sink")
    st = relay.stats()
    assert st["ibdb_transactions"] >= 200
    assert st["ibdb_commits"] < st["ibdb_transactions"], st


def test_unroutable_domain_is_deferred_not_lost(sink, make_relay, tmp_path):
    relay = make_relay(sink.port, '[routes]\ndefault = "[127.0.0.1]:%d"' % sink.port)
    # Rewrite with no default route: only example.net is routed.
    relay.stop()
    with open(relay.config) as f:
        text = f.read()
    text = text.replace('default = "[127.0.0.1]:%d"' % sink.port,
                        '"example.net" = "[127.0.0.1]:%d"' % sink.port)
    with open(relay.config, "w") as f:
        f.write(text)
    relay.start()
    send(relay.port, "a@client.test", ["x@nowhere.example", "y@example.net"],
         b"Subject: r\r\n\r\nbody\r\n")
    wait_until(lambda: sink.count() >= 1, 30, "the routed recipient")
    assert sink.messages()[0]["rcpts"] == ["y@example.net"]
    wait_until(lambda: "no route" in relay.log_text(), 10, "a 'no route' log line")
    assert relay.stats()["deferred"] >= 1
