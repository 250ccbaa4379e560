"""header_checks and body_checks (docs/policy.md) with pcre: and regexp:
tables (docs/tables.md) against a real smx run and a sink: each action seen
at the sink, in the queue and in the log, a folded header matched as one,
body_checks_size_limit, a bad pattern at check-config, a pathological
pattern bounded by the match limit, DATA and BDAT, and a pcre: table as an
access table."""
import subprocess
import time

from conftest import SMX, Raw, strip_received, wait_until

HEADER_CHECKS = r"""# header_checks
/^Subject: reject me/          REJECT 5.7.2 no thanks
/^Subject: discard me/         DISCARD dropped
/^Subject: hold me/            HOLD held for review
/^Subject: first\n\s+second$/  REJECT folded matched
/^X-Warn:/                     WARN looked at
/^X-Drop:/                     IGNORE
/^X-Mark: (\w+)/               PREPEND X-Added: mark=$1
/^X-Old: (.*)/                 REPLACE X-New: $1
/^Subject: (a+)+$/             REJECT catastrophic
"""

BODY_CHECKS = r"""/^body reject/     REJECT
/^ignore this line$/   IGNORE
/^replace (\w+)$/      REPLACE replaced $1
"""


def relay_with(make_relay, sink, tmp_path, extra=""):
    (tmp_path / "header_checks").write_text(HEADER_CHECKS)
    (tmp_path / "body_checks").write_text(BODY_CHECKS)
    return make_relay(sink.port, "[policy]\nheader_checks = [\"pcre:%s\"]\n"
                      "body_checks = [\"regexp:%s\"]\n%s" % (tmp_path / "header_checks",
                                                           tmp_path / "body_checks", extra))


def data(port, content, rcpt="to@example.net"):
    """One message by DATA; the reply to its end."""
    c = Raw(port)
    c.cmd("EHLO client.test")
    assert c.cmd("MAIL FROM:<from@client.test>").startswith("250")
    assert c.cmd("RCPT TO:<%s>" % rcpt).startswith("250")
    assert c.cmd("DATA").startswith("354")
    c.send(content + b".\r\n")
    r = c.reply()
    assert c.cmd("QUIT").startswith("221")
    c.close()
    return r


def bdat(port, content):
    """One message in two BDAT chunks; the reply to the last."""
    c = Raw(port)
    assert "CHUNKING" in c.cmd("EHLO client.test")
    assert c.cmd("MAIL FROM:<from@client.test>").startswith("250")
    assert c.cmd("RCPT TO:<to@example.net>").startswith("250")
    half = len(content) // 2
    one, two = content[:half], content[half:]
    c.send(b"BDAT %d\r\n" % len(one) + one)
    assert c.reply().startswith("250 2.0.0 Ok: %d octets" % len(one))
    c.send(b"BDAT %d LAST\r\n" % len(two) + two)
    r = c.reply()
    assert c.cmd("QUIT").startswith("221")
    c.close()
    return r


def stored(sink, qid_reply):
    """What the sink got of the message queued as the reply says, without our Received:."""
    wait_until(lambda: sink.count() >= 1, 30, "the message at the sink")
    [m] = [m for m in sink.messages() if qid_reply.rsplit(" ", 1)[1].encode() in m["data"][:400]]
    return strip_received(m["data"])[0]


def test_edits_are_stored_and_logged_by_data_and_bdat(sink, make_relay, tmp_path):
    relay = relay_with(make_relay, sink, tmp_path)
    content = (b"Subject: edited\r\nX-Warn: w\r\nX-Drop: gone\r\nX-Mark: m1 more\r\n"
               b"X-Old: old value\r\n\r\n"
               b"first line\r\nignore this line\r\nreplace word\r\nlast\r\n")
    want = (b"Subject: edited\r\nX-Warn: w\r\nX-Added: mark=m1\r\nX-Mark: m1 more\r\n"
            b"X-New: old value\r\n\r\n"
            b"first line\r\nreplaced word\r\nlast\r\n")
    for send in (data, bdat):
        r = send(relay.port, content)
        assert r.startswith("250 2.0.0 Ok: queued as "), r
        qid = r.rsplit(" ", 1)[1]
        wait_until(lambda: any(qid.encode() in m["data"][:400] for m in sink.messages()), 30,
                   "the message at the sink")
        assert stored(sink, r) == want
        relay.log_matching(
            r"%s: warning: header X-Warn: w from \S+\[127\.0\.0\.1\]; from=<from@client\.test> "
            r"to=<to@example\.net> proto=ESMTP helo=<client\.test>: looked at" % qid,
            r"%s: prepend: header X-Mark: m1 more from \S+; .*: X-Added: mark=m1" % qid,
            r"%s: replace: header X-Old: old value from \S+; .*: X-New: old value" % qid,
            r"%s: replace: body replace word from \S+; .*: replaced word" % qid)


def test_reject_discard_hold(sink, make_relay, tmp_path):
    relay = relay_with(make_relay, sink, tmp_path)
    for send in (data, bdat):
        r = send(relay.port, b"Subject: reject me please\r\n\r\nbody\r\n")
        assert r == "550 5.7.2 no thanks", r
        r = send(relay.port, b"Subject: fine\r\n\r\nsome text\r\nbody reject this\r\n")
        assert r == "550 5.7.1 message content rejected", r
        r = send(relay.port, b"Subject: discard me\r\n\r\nbody\r\n")
        assert r.startswith("250 2.0.0 Ok: queued as "), r
        discarded = r.rsplit(" ", 1)[1]
        relay.log_matching(r"%s: discard: header Subject: discard me from \S+; from=<from@client\.test> "
                           r"to=<to@example\.net> proto=ESMTP helo=<client\.test>: dropped" % discarded,
                           r"%s: discarded: from=<from@client\.test>" % discarded)
        r = send(relay.port, b"Subject: hold me\r\n\r\nbody\r\n")
        assert r.startswith("250 2.0.0 Ok: queued as "), r
        held = r.rsplit(" ", 1)[1]
        wait_until(lambda: "header Subject: hold me: held for review" in relay.smx("queue").stdout,
                   20, "the message on hold")
        assert held in relay.smx("queue").stdout
    relay.log_matching(r": reject: header Subject: reject me please from \S+\[127\.0\.0\.1\]; "
                       r"from=<from@client\.test> to=<to@example\.net> proto=ESMTP "
                       r"helo=<client\.test>: 5\.7\.2 no thanks",
                       r": reject: body body reject this from \S+; .*: 5\.7\.1 message content rejected",
                       r": hold: header Subject: hold me from \S+; .*: held for review")
    # Nothing of the rejected, discarded or held ones reached the sink.
    time.sleep(1)
    assert sink.count() == 0
    wait_until(lambda: relay.stats().get("rejected_5xx_header_check") == 2, 10,
               "the header_check rejections counted")
    wait_until(lambda: relay.stats().get("rejected_5xx_body_check") == 2, 10,
               "the body_check rejections counted")


def test_folded_header_is_one_key(sink, make_relay, tmp_path):
    relay = relay_with(make_relay, sink, tmp_path)
    assert data(relay.port, b"Subject: first\r\n\tsecond\r\n\r\nbody\r\n") == \
        "550 5.7.1 folded matched"
    # Either line alone does not match.
    r = data(relay.port, b"Subject: first\r\nX-Other: second\r\n\r\nbody\r\n")
    assert r.startswith("250"), r


def test_body_checks_size_limit(sink, make_relay, tmp_path):
    relay = relay_with(make_relay, sink, tmp_path, "body_checks_size_limit = 1024\n")
    filler = b"x" * 70 + b"\r\n"
    early = b"Subject: s\r\n\r\n" + filler * 10 + b"body reject early\r\n"
    assert data(relay.port, early) == "550 5.7.1 message content rejected"
    late = b"Subject: s\r\n\r\n" + filler * 20 + b"body reject late\r\n"
    r = data(relay.port, late)
    assert r.startswith("250"), r
    assert stored(sink, r) == late


def test_pathological_pattern_is_bounded(sink, make_relay, tmp_path):
    relay = relay_with(make_relay, sink, tmp_path)
    # /^Subject: (a+)+$/ backtracks 2^n ways on n a's not followed by the end.
    t0 = time.monotonic()
    c = Raw(relay.port)
    c.cmd("EHLO client.test")
    c.cmd("MAIL FROM:<from@client.test>")
    c.cmd("RCPT TO:<to@example.net>")
    assert c.cmd("DATA").startswith("354")
    c.send(b"Subject: " + b"a" * 5000 + b"!\r\n\r\nbody\r\n.\r\n")
    assert c.reply() == "451 4.3.0 Error: temporary header_checks lookup failure"
    # The session goes on.
    assert c.cmd("NOOP").startswith("250")
    c.cmd("QUIT")
    # Unbounded this would take longer than the universe has; the match
    # limit stops it in milliseconds. The bound is for a loaded machine.
    assert time.monotonic() - t0 < 30
    relay.log_matching(r"warning: \S+: header_checks: header Subject: a+.*: header_checks lookup failed")
    # A plain subject of a's matches the rule.
    assert data(relay.port, b"Subject: aaaa\r\n\r\nbody\r\n") == "550 5.7.1 catastrophic"


def test_bad_pattern_is_reported_with_file_and_line(sink, make_relay, tmp_path):
    bad = tmp_path / "bad_checks"
    bad.write_text("# fine\n/^Subject: ok/ WARN\n/^Subject: (unclosed/ REJECT\n")
    relay = make_relay(sink.port, "[policy]\nheader_checks = [\"pcre:%s\"]\n" % bad, start=False)
    r = subprocess.run([SMX, "check-config", "-c", relay.config], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2, r
    out = r.stdout + r.stderr
    assert "policy.header_checks: pcre:%s: %s, line 3: error in the pattern at offset" % (bad, bad) \
        in out, out
    bad.write_text("/a/ x\n/b/q y\n")
    (tmp_path / "r2").mkdir()
    relay2 = make_relay(sink.port, "[policy]\nbody_checks = [\"regexp:%s\"]\n" % bad, start=False,
                        tmp=str(tmp_path / "r2"))
    r = subprocess.run([SMX, "check-config", "-c", relay2.config], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2 and "line 2: unknown flag \"q\"" in r.stdout + r.stderr, r


def test_pcre_table_as_sender_access(sink, make_relay, tmp_path):
    table = tmp_path / "sender_access"
    table.write_text("/^spam[0-9]*@/ REJECT no spammers\n/@trusted\\.test$/ OK\n")
    relay = make_relay(sink.port, "[policy]\nsender_access = [\"pcre:%s\"]\n" % table)
    c = Raw(relay.port)
    c.cmd("EHLO client.test")
    assert c.cmd("MAIL FROM:<spam42@client.test>").startswith("250")
    r = c.cmd("RCPT TO:<to@example.net>")
    assert r == "554 5.7.1 <spam42@client.test>: Sender address rejected: no spammers", r
    c.cmd("RSET")
    assert c.cmd("MAIL FROM:<ham@client.test>").startswith("250")
    assert c.cmd("RCPT TO:<to@example.net>").startswith("250")
    c.cmd("QUIT")
    # smx map query answers as a lookup does.
    q = subprocess.run([SMX, "map", "query", "pcre:%s" % table, "spam7@x.test"], capture_output=True,
                       text=True, timeout=30)
    assert q.returncode == 0 and q.stdout == "REJECT no spammers\n", q
    q = subprocess.run([SMX, "map", "query", "-t", "regexp", str(table), "ham@x.test"],
                       capture_output=True, text=True, timeout=30)
    assert q.returncode == 1, q
