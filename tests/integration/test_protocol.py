"""Small protocol details seen from outside: duplicate recipients, long lines
going out."""
from conftest import Raw, send, strip_received, wait_until


def test_duplicate_recipient_is_delivered_once(sink, make_relay):
    relay = make_relay(sink.port)
    c = Raw(relay.port)
    c.cmd("EHLO client.test")
    assert c.cmd("MAIL FROM:<from@client.test>").startswith("250")
    for rcpt in ("a@example.net", "a@EXAMPLE.net", "a@example.net", "b@example.net"):
        assert c.cmd("RCPT TO:<%s>" % rcpt).startswith("250 2.1.5")
    assert c.cmd("DATA").startswith("354")
    assert c.cmd("Subject: dup\r\n\r\nbody\r\n.").startswith("250")
    wait_until(lambda: sink.count() >= 1, 30, "the message")
    # Give a second copy the time it would take to appear.
    send(relay.port, "marker@client.test", ["m@example.net"], b"Subject: m\r\n\r\nm\r\n")
    wait_until(lambda: sink.count() >= 2, 30, "the marker message")
    msgs = [m for m in sink.messages() if m["from"] == "from@client.test"]
    assert len(msgs) == 1
    assert sorted(msgs[0]["rcpts"]) == ["a@example.net", "b@example.net"]


def test_long_lines_are_broken_as_postfix_does(sink, make_relay):
    relay = make_relay(sink.port)
    exact = b"e" * 998
    long = b"." + b"x" * 2100
    send(relay.port, "from@client.test", ["to@example.net"],
         b"Subject: long\r\n\r\n" + exact + b"\r\n" + long + b"\r\nend\r\n")
    wait_until(lambda: sink.count() == 1, 30, "the message")
    body, _ = strip_received(sink.messages()[0]["data"])
    # The sink stores what came over the wire, dot-unstuffed: a line of 998
    # passes whole, a longer one is broken by CRLF SPACE after 998 octets and
    # every 997 more (the space counts), as smtp_line_length_limit = 998.
    assert body == (b"Subject: long\r\n\r\n" + exact + b"\r\n" + long[:998] + b"\r\n " +
                    long[998:1995] + b"\r\n " + long[1995:] + b"\r\nend\r\n")
    assert all(len(line) <= 998 for line in body.split(b"\r\n"))
