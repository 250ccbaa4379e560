"""The DSN extension (RFC 3461) end to end: SMTPS checks NOTIFY, ORCPT, RET and
ENVID; SMTPC passes them on to a next hop that offers DSN (and BODY=8BITMIME to
one that offers 8BITMIME); QMGR's own DSNs honour them, and NOTIFY=SUCCESS to a
next hop without DSN gives an `Action: relayed` notice. The scripted next hop
(sink.py) records the MAIL and RCPT parameters it got."""
import smtplib

import pytest

from conftest import Raw, wait_until

MSG = b"Subject: dsn test\r\nMessage-ID: <dsn-test@client.test>\r\n\r\nthe body line\r\n"


def submit(port, rcpts, mail_options=(), rcpt_options=(), body=MSG):
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as c:
        c.ehlo("client.test")
        assert c.has_extn("dsn")
        c.sendmail("sender@client.test", rcpts, body, mail_options=list(mail_options),
                   rcpt_options=list(rcpt_options))


def dsns(sink):
    return [m for m in sink.messages() if m["from"] == ""]


def originals(sink):
    return [m for m in sink.messages() if m["from"] != ""]


@pytest.mark.parametrize("line, reply", [
    ("RCPT TO:<a@example.net> NOTIFY=NEVER,SUCCESS", "501 5.5.4"),
    ("RCPT TO:<a@example.net> NOTIFY=ALWAYS", "501 5.5.4"),
    ("RCPT TO:<a@example.net> NOTIFY=", "501 5.5.4"),
    ("RCPT TO:<a@example.net> NOTIFY=FAILURE NOTIFY=DELAY", "501 5.5.4"),
    ("RCPT TO:<a@example.net> ORCPT=a@example.net", "501 5.5.4"),
    ("RCPT TO:<a@example.net> ORCPT=rfc822;a=b", "501 5.5.4"),
    ("RCPT TO:<a@example.net> ORCPT=rfc822;" + "x" * 494, "501 5.5.4"),
    ("RCPT TO:<a@example.net> FOO=BAR", "555 5.5.4"),
    ("RCPT TO:<a@example.net> NOTIFY=SUCCESS,FAILURE,DELAY ORCPT=rfc822;a+2Bb@example.net", "250"),
    # 543 characters: RFC 3461 allows RCPT 500 more than the usual 512...
    ("RCPT TO:<b@example.net> NOTIFY=NEVER ORCPT=rfc822;" + "x" * 493, "250"),
    # ...but not more.
    ("RCPT TO:<b@example.net> NOTIFY=NEVER ORCPT=rfc822;x " + "X=" * 490, "500 5.5.2"),
])
def test_rcpt_parameters_are_checked(sink, make_relay, line, reply):
    relay = make_relay(sink.port)
    c = Raw(relay.port)
    assert "250-DSN" in c.cmd("EHLO client.test")
    assert c.cmd("MAIL FROM:<s@client.test>").startswith("250")
    assert c.cmd(line).startswith(reply)
    c.close()


@pytest.mark.parametrize("params, reply", [
    ("RET=BODY", "501 5.5.4"),
    ("RET=FULL RET=HDRS", "501 5.5.4"),
    ("ENVID=", "501 5.5.4"),
    ("ENVID=a=b", "501 5.5.4"),
    ("ENVID=" + "x" * 101, "501 5.5.4"),
    ("ENVID=" + "x" * 100 + " RET=hdrs", "250"),
    ("NOTIFY=NEVER", "555 5.5.4"),  # a RCPT parameter
])
def test_mail_parameters_are_checked(sink, make_relay, params, reply):
    relay = make_relay(sink.port)
    c = Raw(relay.port)
    c.cmd("EHLO client.test")
    assert c.cmd("MAIL FROM:<s@client.test> " + params).startswith(reply)
    c.close()


def test_passed_on_to_a_next_hop_that_offers_dsn(make_sink, make_relay):
    sink = make_sink("--dsn")
    relay = make_relay(sink.port)
    submit(relay.port, ["a@example.net", "b@example.net"],
           mail_options=["RET=HDRS", "ENVID=QQ+2B314", "BODY=8BITMIME"],
           rcpt_options=["NOTIFY=SUCCESS,FAILURE", "ORCPT=rfc822;orig+2Ba@example.org"])
    wait_until(lambda: sink.count() == 1, 30, "the message")
    m = sink.messages()[0]
    assert m["rcpts"] == ["a@example.net", "b@example.net"]
    mail = m["params"].split()
    assert "RET=HDRS" in mail and "ENVID=QQ+2B314" in mail and "BODY=8BITMIME" in mail, mail
    assert m["rcpt_params"] == ["NOTIFY=SUCCESS,FAILURE ORCPT=rfc822;orig+2Ba@example.org"] * 2
    # The next hop took the NOTIFY on: no notice from us.
    wait_until(lambda: "status=sent" in relay.log_text(), 10, "the log")
    assert dsns(sink) == []


def test_next_hop_without_dsn_gets_no_parameters_and_success_is_relayed(sink, make_relay):
    relay = make_relay(sink.port)
    submit(relay.port, ["a@example.net"], mail_options=["RET=HDRS", "ENVID=QQ+2B314"],
           rcpt_options=["NOTIFY=SUCCESS", "ORCPT=rfc822;orig+2Ba@example.org"])
    wait_until(lambda: len(dsns(sink)) == 1, 30, "the relayed notice")
    m = originals(sink)[0]
    assert "RET" not in m["params"] and "ENVID" not in m["params"], m["params"]
    assert m["rcpt_params"] == [""]
    d = dsns(sink)[0]
    assert d["rcpts"] == ["sender@client.test"]
    text = d["data"].decode()
    assert "Subject: Successful Mail Delivery Report" in text
    assert "Action: relayed\r\n" in text
    assert "Status: 2.0.0\r\n" in text
    assert "Original-Envelope-Id: QQ+314\r\n" in text
    assert "Original-Recipient: rfc822; orig+a@example.org\r\n" in text
    assert "Final-Recipient: rfc822; a@example.net\r\n" in text
    assert "Content-Type: text/rfc822-headers" in text and "the body line" not in text
    assert len(dsns(sink)) == 1


def test_notify_never_and_without_failure_give_no_bounce(make_sink, make_relay):
    sink = make_sink("--permfail", "^(never|success|failure)@")
    relay = make_relay(sink.port)
    submit(relay.port, ["never@example.net"], rcpt_options=["NOTIFY=NEVER"])
    submit(relay.port, ["success@example.net"], rcpt_options=["NOTIFY=SUCCESS,DELAY"])
    submit(relay.port, ["failure@example.net"], rcpt_options=["NOTIFY=FAILURE"])
    wait_until(lambda: relay.log_text().count("status=bounced") == 3, 30, "three bounces")
    wait_until(lambda: len(dsns(sink)) >= 1, 30, "the one DSN")
    wait_until(lambda: relay.log_text().count("NOTIFY without FAILURE") == 2, 10, "the log")
    got = dsns(sink)
    assert len(got) == 1, [d["data"][:300] for d in got]
    text = got[0]["data"].decode()
    assert "Final-Recipient: rfc822; failure@example.net" in text
    assert "Status: 5.1.1" in text and "Diagnostic-Code: smtp; 550 5.1.1" in text
    assert "Remote-MTA: dns; 127.0.0.1" in text


def test_ret_full_returns_the_message_and_hdrs_only_the_headers(make_sink, make_relay):
    sink = make_sink("--permfail", "^(full|hdrs|default)@")
    relay = make_relay(sink.port)
    submit(relay.port, ["full@example.net"], mail_options=["RET=FULL", "ENVID=full1"])
    submit(relay.port, ["hdrs@example.net"], mail_options=["RET=HDRS", "ENVID=hdrs1"])
    submit(relay.port, ["default@example.net"], mail_options=["ENVID=default1"])
    wait_until(lambda: len(dsns(sink)) == 3, 30, "three DSNs")
    by_envid = {}
    for d in dsns(sink):
        text = d["data"].decode()
        envid = text.split("Original-Envelope-Id: ")[1].split("\r\n")[0]
        by_envid[envid] = text
    assert "Content-Type: message/rfc822" in by_envid["full1"]
    assert "the body line" in by_envid["full1"]
    for envid in ("hdrs1", "default1"):
        assert "Content-Type: text/rfc822-headers" in by_envid[envid]
        assert "Subject: dsn test" in by_envid[envid]
        assert "the body line" not in by_envid[envid]


def test_ret_full_from_outside_relay_networks_returns_headers_only(make_sink, make_relay):
    sink = make_sink("--permfail", "^x@")
    # 127.0.0.1 is not in relay_networks here; example.net is a relay domain.
    relay = make_relay(sink.port, '[server]\nrelay_networks = ["10.9.9.0/24"]\n'
                                  'relay_domains = ["example.net"]')
    submit(relay.port, ["x@example.net"], mail_options=["RET=FULL"])
    wait_until(lambda: len(dsns(sink)) == 1, 30, "the DSN")
    text = dsns(sink)[0]["data"].decode()
    assert "Content-Type: text/rfc822-headers" in text and "the body line" not in text


def test_notify_without_delay_gets_no_delay_warning(make_sink, make_relay):
    sink = make_sink("--tempfail-rcpt", "^(warn|nowarn)@")
    relay = make_relay(sink.port, "[queue]\ndelay_warning_time = 1")
    submit(relay.port, ["warn@example.net"], rcpt_options=["NOTIFY=DELAY"])
    submit(relay.port, ["nowarn@example.net"], rcpt_options=["NOTIFY=FAILURE"])
    wait_until(lambda: len(dsns(sink)) >= 1, 30, "the delay warning")
    wait_until(lambda: relay.log_text().count("status=deferred") >= 6, 30, "more retries")
    got = dsns(sink)
    assert len(got) == 1
    text = got[0]["data"].decode()
    assert "Action: delayed" in text and "Final-Recipient: rfc822; warn@example.net" in text


def test_body_8bitmime_to_a_next_hop_without_8bitmime_is_sent_as_is(make_sink, make_relay):
    sink = make_sink("--no-8bitmime")
    relay = make_relay(sink.port)
    body = "Subject: 8bit\r\n\r\ngrüße\r\n".encode()
    submit(relay.port, ["a@example.net"], mail_options=["BODY=8BITMIME"], body=body)
    wait_until(lambda: sink.count() == 1, 30, "the message")
    m = sink.messages()[0]
    assert "BODY" not in m["params"]
    assert "grüße".encode() in m["data"]
