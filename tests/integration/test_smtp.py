"""SMTP server rules and limits of smx, checked over real sockets."""
import smtplib
import time

import pytest

from conftest import Raw, send, wait_until


@pytest.fixture
def relay(sink, make_relay):
    return make_relay(sink.port, "[server]\nmax_message_size = 100000\nmax_recipients = 5\n"
                                 "command_timeout = 2\nmax_errors = 3")


def test_ehlo_advertises_extensions(relay):
    c = Raw(relay.port)
    assert c.greeting.startswith("220 ")
    r = c.cmd("EHLO client.test")
    for ext in ("PIPELINING", "SIZE 100000", "8BITMIME", "ENHANCEDSTATUSCODES"):
        assert ext in r
    assert c.cmd("VRFY someone").startswith("252")
    assert c.cmd("NOOP").startswith("250")
    assert c.cmd("HELP").startswith("214")
    assert c.cmd("BOGUS").startswith("500")
    assert c.cmd("QUIT").startswith("221")


def test_pipelined_transaction_is_relayed(relay, sink):
    c = Raw(relay.port)
    c.cmd("EHLO client.test")
    c.send(b"MAIL FROM:<p@client.test>\r\nRCPT TO:<a@example.net>\r\nRCPT TO:<b@example.net>\r\n"
           b"DATA\r\n")
    replies = [c.reply() for _ in range(4)]
    assert [r[:3] for r in replies] == ["250", "250", "250", "354"], replies
    c.send(b"Subject: p\r\n\r\n..leading dot\r\n.\r\n")
    assert c.reply().startswith("250")
    assert c.cmd("QUIT").startswith("221")
    wait_until(lambda: sink.count() == 1, 30, "the message")
    m = sink.messages()[0]
    assert sorted(m["rcpts"]) == ["a@example.net", "b@example.net"]
    assert m["data"].endswith(b"\r\n\r\n.leading dot\r\n")


def test_sequence_and_syntax_errors(relay):
    c = Raw(relay.port)
    c.cmd("EHLO client.test")
    assert c.cmd("RCPT TO:<a@example.net>").startswith("503")
    assert c.cmd("DATA").startswith("503")
    assert c.cmd("MAIL FROM:nobrackets").startswith("501")
    c.close()


def test_relay_denied_outside_relay_networks(sink, make_relay):
    relay = make_relay(sink.port, '[server]\nrelay_networks = ["192.0.2.0/24"]\n'
                                  'relay_domains = ["example.net"]')
    c = Raw(relay.port)
    c.cmd("EHLO client.test")
    assert c.cmd("MAIL FROM:<a@client.test>").startswith("250")
    r = c.cmd("RCPT TO:<victim@elsewhere.org>")
    assert r.startswith("554 5.7.1"), r
    assert c.cmd("RCPT TO:<ok@example.net>").startswith("250")
    c.close()


def test_size_limit_declared_and_actual(relay):
    c = Raw(relay.port)
    c.cmd("EHLO client.test")
    assert c.cmd("MAIL FROM:<a@client.test> SIZE=200000").startswith("552 5.3.4")
    assert c.cmd("MAIL FROM:<a@client.test>").startswith("250")
    assert c.cmd("RCPT TO:<x@example.net>").startswith("250")
    assert c.cmd("DATA").startswith("354")
    c.send((b"x" * 998 + b"\r\n") * 120 + b".\r\n")
    r = c.reply()
    assert r.startswith("552 5.3.4"), r
    # The session goes on after the rejected message.
    assert c.cmd("NOOP").startswith("250")


def test_too_many_recipients(relay):
    c = Raw(relay.port)
    c.cmd("EHLO client.test")
    c.cmd("MAIL FROM:<a@client.test>")
    for i in range(5):
        assert c.cmd("RCPT TO:<r%d@example.net>" % i).startswith("250")
    assert c.cmd("RCPT TO:<r5@example.net>").startswith("452 4.5.3")


def test_bare_lf_in_data_is_rejected(relay, sink):
    c = Raw(relay.port)
    c.cmd("EHLO client.test")
    c.cmd("MAIL FROM:<a@client.test>")
    c.cmd("RCPT TO:<x@example.net>")
    c.cmd("DATA")
    c.send(b"Subject: smuggle\r\n\r\nline\n.\nMAIL FROM:<evil@x>\r\n.\r\n")
    r = c.reply()
    assert r.startswith("550 5.6.11"), r
    c.cmd("MAIL FROM:<a@client.test>")
    c.cmd("RCPT TO:<x@example.net>")
    c.cmd("DATA")
    c.send(b"Subject: bare cr\r\n\r\nline\rmore\r\n.\r\n")
    assert c.reply().startswith("550 5.6.11")
    time.sleep(0.5)
    assert sink.count() == 0


def test_command_line_too_long(relay):
    c = Raw(relay.port)
    c.cmd("EHLO client.test")
    r = c.cmd("NOOP " + "x" * 600)
    assert r.startswith("500 5.5.2"), r
    assert c.cmd("NOOP").startswith("250")


def test_hop_count_limit(sink, make_relay):
    relay = make_relay(sink.port, "[server]\nmax_hops = 5")
    body = b"".join(b"Received: from h%d by h%d; Mon, 1 Jan 2024 00:00:00 +0000\r\n" % (i, i)
                    for i in range(6)) + b"Subject: loop\r\n\r\nx\r\n"
    with pytest.raises(smtplib.SMTPDataError) as e:
        send(relay.port, "a@client.test", ["x@example.net"], body)
    assert e.value.smtp_code == 554
    assert b"5.4.6" in e.value.smtp_error


def test_idle_client_gets_421(relay):
    c = Raw(relay.port)
    c.cmd("EHLO client.test")
    t0 = time.monotonic()
    r = c.reply()
    assert r.startswith("421"), r
    assert time.monotonic() - t0 < 10


def test_too_many_errors_disconnects(relay):
    c = Raw(relay.port)
    replies = []
    try:
        for _ in range(5):
            replies.append(c.cmd("BOGUS"))
            if replies[-1].startswith("500"):
                continue
            break
        replies.append(c.reply())
    except OSError:
        pass
    # max_errors = 3: the third error ends the session with 421.
    assert any(r.startswith("421") for r in replies), replies
    assert sum(r.startswith("500") for r in replies) <= 3, replies


def test_connection_limit(sink, make_relay):
    relay = make_relay(sink.port, "[server]\nmax_connections = 2")

    # make_relay's start-up probe counts until SMTPS has seen it close.
    def two_sessions():
        a, b = Raw(relay.port), Raw(relay.port)
        if a.greeting.startswith("220") and b.greeting.startswith("220"):
            return a, b
        a.close()
        b.close()
        time.sleep(0.1)
        return None
    a, b = wait_until(two_sessions, 10, "two sessions greeted")
    c = Raw(relay.port)
    assert c.greeting.startswith("421"), c.greeting
