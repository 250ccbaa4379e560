"""milter.non_smtpd_milters (docs/milter.md, Local submission): mail from
the sendmail command shown by smx-pickup to the scripted milter of
milter_peer.py before its commit, as postfix's cleanup shows local mail;
its edits at the sink, a reject (bounced), a tempfail and the retry, a milter that
is down, a discard, a quarantine; and the two lists kept apart. Real
sendmail, smx-postdrop and smx-pickup as in test_sendmail.py (root only:
it switches users)."""
import os
import re

import pytest

from conftest import Raw, wait_until
from test_milter import SHORT, milter_failures, peers, stats_listen  # noqa: F401 (peers: the fixture)
from test_sendmail import local  # noqa: F401 (the fixture)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: it switches users")


def config(non_smtpd=(), smtpd=()):
    def items(specs):
        return ", ".join('"%s"' % s for s in specs)
    return "[milter]\nsmtpd_milters = [%s]\nnon_smtpd_milters = [%s]\n%s" % (
        items(smtpd), items(non_smtpd), SHORT)


def message_sessions(m):
    """The milter's sessions that saw a message (not a start-up probe)."""
    with m.lock:
        return [s for s in m.sessions if "eom" in s.stages]


def submit(lm, subject, rcpt="r@example.net"):
    r = lm.sendmail(rcpt, input=b"Subject: %s\n\nthe body\n" % subject.encode())
    assert r.returncode == 0, r.stderr


def test_local_mail_is_shown_as_from_localhost_and_its_edits_reach_the_sink(sink, local, peers):
    m = peers(script={"eom": ["addheader X-Local-Milter checked", "addrcpt <added@example.net>",
                              "continue"]})
    lm = local(config(non_smtpd=[m.socket_spec]))
    submit(lm, "edited")
    wait_until(lambda: sink.count() == 1, 30, "the message at the sink")
    got = sink.messages()[0]
    assert b"\r\nX-Local-Milter: checked\r\n" in got["data"], got["data"][:400]
    assert got["data"].endswith(b"\r\n\r\nthe body\r\n")
    assert sorted(got["rcpts"]) == ["added@example.net", "r@example.net"]
    s = message_sessions(m)[0]
    assert s.stages[:5] == ["connect", "helo", "mail", "rcpt", "data"], s.stages
    connect = s.data[0][1].split(b"\0")
    assert connect[0] == b"localhost" and connect[1][:1] == b"4", connect
    assert s.data[1][1].rstrip(b"\0") == b"localhost"
    assert s.macros["C"]["{client_addr}"] == "127.0.0.1"
    assert s.macros["C"]["{daemon_name}"] == "smx.test"
    assert s.macros["M"]["{mail_addr}"] == "nobody@smx.test"
    assert s.macros["M"]["{mail_host}"] == "smx.test"
    assert s.macros["R"]["{rcpt_addr}"] == "r@example.net"
    assert s.macros["R"]["{rcpt_host}"] == "example.net"
    assert [h[0] for h in s.headers][0] == "Received"
    assert ("Subject", "edited") in s.headers
    assert s.body == b"the body\r\n"
    assert lm.files() == [] and lm.files(lm.quarantine) == []


def test_a_reject_bounces_to_the_sender(sink, local, peers):
    """As postfix's cleanup: the user's sendmail has long returned, so the
    refusal reaches them as a DSN; the recipients get nothing."""
    m = peers(script={"eom": "reject"})
    lm = local(config(non_smtpd=[m.socket_spec]))
    submit(lm, "rejected")
    wait_until(lambda: sink.count() >= 1, 30, "the bounce at the sink")
    reject = (r"(\w+): milter-reject: uid=\d+ from=<nobody@smx\.test>: 550 5\.7\.1 "
              r"Command rejected")
    qid = re.search(reject, lm.relay.log_matching(reject)).group(1)
    lm.relay.log_matching(r"%s: refused by the milters: 550 5\.7\.1 Command rejected" % qid)
    msgs = sink.messages()
    assert len(msgs) == 1 and msgs[0]["from"] == "" and msgs[0]["rcpts"] == ["nobody@smx.test"], msgs
    data = msgs[0]["data"].decode("utf-8", "replace")
    assert "report-type=delivery-status" in data and "Action: failed" in data, data
    assert "Final-Recipient: rfc822; r@example.net" in data and "Status: 5.7.1" in data, data
    assert "Command rejected" in data and "Subject: rejected" in data, data
    assert lm.files() == [] and lm.files(lm.quarantine) == []


def test_a_tempfail_gives_the_file_back_and_it_goes_once_the_milter_recovers(sink, local, peers):
    state = {"fail": True}
    m = peers(script={"eom": lambda d: "tempfail" if state["fail"] else "continue"})
    lm = local(config(non_smtpd=[m.socket_spec]))
    submit(lm, "later")
    lm.relay.log_matching(r"deferred by milter \(4\.7\.1 Service unavailable - try again "
                          r"later\); trying again in 10 s")
    assert sink.count() == 0
    wait_until(lambda: lm.files(), 10, "the file back in the maildrop")
    state["fail"] = False
    wait_until(lambda: sink.count() == 1, 40, "the message at the sink after the retry")
    assert len(message_sessions(m)) >= 2
    wait_until(lambda: lm.files() == [], 10, "the maildrop empty")
    assert lm.files(lm.quarantine) == []


def test_a_failed_milter_with_default_tempfail_defers(sink, local, peers):
    m = peers()
    m.stop()  # nobody listens: its default action, tempfail
    stats, mport = stats_listen()
    lm = local(config(non_smtpd=[m.socket_spec]) + stats)
    submit(lm, "unreachable")
    lm.relay.log_matching(r"deferred by milter \(4\.7\.1 Service unavailable - try again later\)")
    assert sink.count() == 0
    assert lm.files(lm.quarantine) == []
    # smx-pickup's failures are counted with SMTPS's (once per try: it tries again).
    wait_until(lambda: milter_failures(mport)["tempfail"] >= 1, 10, "the failure counted")


def test_a_discard_drops_the_message(sink, local, peers):
    m = peers(script={"eom": "discard"})
    lm = local(config(non_smtpd=[m.socket_spec]))
    submit(lm, "dropped")
    lm.relay.log_matching(r"[0-9A-F]{17}: milter-discard: uid=\d+ from=<nobody@smx\.test>")
    wait_until(lambda: lm.files() == [], 10, "the maildrop empty")
    assert lm.files(lm.quarantine) == []
    assert sink.count() == 0


def test_smtpd_milters_do_not_see_local_mail_nor_non_smtpd_milters_smtp_mail(sink, local, peers):
    smtpd = peers(script={"eom": ["addheader X-Seen-By smtpd", "continue"]})
    non_smtpd = peers(script={"eom": ["addheader X-Seen-By non_smtpd", "continue"]})
    lm = local(config(non_smtpd=[non_smtpd.socket_spec], smtpd=[smtpd.socket_spec]))
    submit(lm, "local")
    c = Raw(lm.relay.port)
    assert c.cmd("EHLO client.test").startswith("250")
    assert c.cmd("MAIL FROM:<s@example.org>").startswith("250")
    assert c.cmd("RCPT TO:<r@example.net>").startswith("250")
    assert c.cmd("DATA").startswith("354")
    c.send(b"Subject: smtp\r\n\r\nbody\r\n.\r\n")
    assert c.reply().startswith("250 2.0.0 Ok: queued")
    c.cmd("QUIT")
    c.close()
    wait_until(lambda: sink.count() == 2, 30, "both messages at the sink")
    seen = {}
    for msg in sink.messages():
        subject = re.search(rb"\r\nSubject: (\w+)\r\n", msg["data"]).group(1)
        seen[subject] = re.findall(rb"\r\nX-Seen-By: (\w+)\r\n", msg["data"])
    assert seen == {b"local": [b"non_smtpd"], b"smtp": [b"smtpd"]}, seen
    assert [s.macros["C"]["{client_addr}"] for s in message_sessions(non_smtpd)] == ["127.0.0.1"]
    assert len(message_sessions(smtpd)) == 1


def test_a_quarantine_holds_the_message(sink, local, peers):
    m = peers(script={"eom": ["quarantine local spam", "continue"]})
    lm = local(config(non_smtpd=[m.socket_spec]))
    submit(lm, "held")
    wait_until(lambda: "local spam" in lm.relay.smx("queue").stdout, 30, "the held message")
    q = lm.relay.smx("queue").stdout
    assert "(held," in q and "milter: local spam" in q, q
    lm.relay.log_matching(r"[0-9A-F]{17}: milter-hold: uid=\d+ from=<nobody@smx\.test>: "
                          r"local spam")
    assert lm.files() == [] and sink.count() == 0
