"""SMTPUTF8 (RFC 6531): UTF-8 addresses only with the parameter, passed on to a
next hop that offers SMTPUTF8, bounced 5.6.7 by one that does not."""
import smtplib

from conftest import Raw, wait_until

RCPT = "jösé@exämple.net"


def wire(addr):
    """An address as the sink records it (it reads commands as latin-1)."""
    return addr.encode("utf-8").decode("latin-1")


def test_utf8_addresses_need_the_parameter(sink, make_relay):
    relay = make_relay(sink.port)
    c = Raw(relay.port)
    assert "SMTPUTF8" in c.cmd("EHLO client.test")
    c.send("MAIL FROM:<sëndér@client.test>\r\n".encode())
    assert c.reply().startswith("553 5.6.7")
    assert c.cmd("MAIL FROM:<s@client.test>").startswith("250")
    c.send(("RCPT TO:<%s>\r\n" % RCPT).encode())
    assert c.reply().startswith("553 5.6.7")
    assert c.cmd("RSET").startswith("250")
    # Malformed UTF-8 is refused even with the parameter.
    c.send(b"MAIL FROM:<s\xc3@client.test> SMTPUTF8\r\n")
    assert c.reply().startswith("501 5.1.7")
    c.close()


def test_smtputf8_is_passed_on(make_sink, make_relay):
    sink = make_sink("--smtputf8")
    relay = make_relay(sink.port)
    with smtplib.SMTP("127.0.0.1", relay.port, timeout=30) as c:
        c.ehlo("client.test")
        assert c.has_extn("smtputf8")
        c.sendmail("sëndér@client.test", [RCPT],
                   "Subject: grüße\r\n\r\nbody\r\n".encode(), mail_options=["SMTPUTF8"])
    wait_until(lambda: sink.count() == 1, 30, "the message")
    m = sink.messages()[0]
    assert m["from"] == wire("sëndér@client.test")
    assert m["rcpts"] == [wire(RCPT)]
    assert "SMTPUTF8" in m["params"].split()
    assert "Subject: grüße".encode() in m["data"]


def test_next_hop_without_smtputf8_bounces(sink, make_relay):
    relay = make_relay(sink.port)
    with smtplib.SMTP("127.0.0.1", relay.port, timeout=30) as c:
        c.ehlo("client.test")
        c.sendmail("sender@client.test", [RCPT], b"Subject: x\r\n\r\nbody\r\n",
                   mail_options=["SMTPUTF8"])
    wait_until(lambda: sink.count() >= 1, 30, "the bounce")
    wait_until(lambda: "status=bounced" in relay.log_text() or sink.count() > 1, 10, "the log")
    msgs = sink.messages()
    assert [m["from"] for m in msgs] == [""], msgs
    assert msgs[0]["rcpts"] == ["sender@client.test"]
    data = msgs[0]["data"].decode("utf-8", "replace")
    assert "5.6.7" in data and "SMTPUTF8 is required" in data
