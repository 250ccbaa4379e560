"""CHUNKING / BDAT inbound (RFC 3030), relayed to a next hop that does not
offer CHUNKING (the test sink): SMTPC sends it with DATA."""
from conftest import Raw, strip_received, wait_until


def envelope(c, rcpt="to@example.net"):
    assert "CHUNKING" in c.cmd("EHLO client.test")
    assert c.cmd("MAIL FROM:<from@client.test>").startswith("250")
    assert c.cmd("RCPT TO:<%s>" % rcpt).startswith("250")


def chunk(c, bdat, octets):
    """A BDAT command and its octets (cmd would add a CRLF to them)."""
    c.send(bdat.encode() + b"\r\n" + octets)
    return c.reply()


def test_bdat_message_is_relayed_with_data(sink, make_relay):
    relay = make_relay(sink.port)
    c = Raw(relay.port)
    envelope(c)
    # Pipelined chunks; the content has dot lines, which the next hop must
    # get dot-stuffed by SMTPC and store as sent, and a CRLF cut in two.
    one = b"Subject: chunks\r\n\r\n.\r\n..two dots\r"
    two = b"\nlast line\r\n"
    c.send(b"BDAT %d\r\n" % len(one) + one + b"BDAT %d LAST\r\n" % len(two) + two)
    assert c.reply() == "250 2.0.0 Ok: %d octets received" % len(one)
    assert c.reply().startswith("250 2.0.0 Ok: queued as ")
    assert c.cmd("QUIT").startswith("221")
    wait_until(lambda: sink.count() == 1, 30, "the message at the sink")
    m = sink.messages()[0]
    assert m["rcpts"] == ["to@example.net"]
    body, received = strip_received(m["data"])
    assert body == one + two
    assert b"with ESMTP id " in received


def test_bdat_smuggling_is_refused(sink, make_relay):
    relay = make_relay(sink.port)
    c = Raw(relay.port)
    envelope(c)
    # A bare LF before the dot, in one chunk and across two: no second
    # message appears, whatever the next hop would make of it.
    evil = b"a\r\n.\nMAIL FROM:<evil@x>\r\nRCPT TO:<v@example.net>\r\nDATA\r\nx\r\n.\r\n"
    assert chunk(c, "BDAT %d LAST" % len(evil), evil).startswith("550 5.6.11")
    envelope(c)
    assert chunk(c, "BDAT 3", b"a\r\n").startswith("250")
    assert chunk(c, "BDAT 3 LAST", b"\n.\n").startswith("550 5.6.11")
    assert c.cmd("NOOP").startswith("250")
    # DATA in a BDAT transaction is refused; the transaction goes on.
    envelope(c)
    assert chunk(c, "BDAT 4", b"ok\r\n").startswith("250")
    assert c.cmd("DATA").startswith("503 5.5.1")
    assert c.cmd("BDAT 0 LAST").startswith("250 2.0.0 Ok: queued as ")
    wait_until(lambda: sink.count() == 1, 30, "the one good message")
    body, _ = strip_received(sink.messages()[0]["data"])
    assert body == b"ok\r\n"
    wait_until(lambda: "reject: BDAT from" in relay.log_text(), 10, "the reject log line")


def test_bdat_size_limit(sink, make_relay):
    relay = make_relay(sink.port, "[server]\nmax_message_size = 1000")
    c = Raw(relay.port)
    envelope(c)
    big = b"x" * 3000
    assert chunk(c, "BDAT 3000", big).startswith("552 5.3.4")
    # The 3000 octets were read as a chunk, not as commands.
    assert c.cmd("NOOP").startswith("250")
    assert chunk(c, "BDAT 1 LAST", b"x").startswith("503 5.5.1")
