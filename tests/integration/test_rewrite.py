"""Rewriting and routing by address (issue 28, item 4), with a real `smx run`
and real sinks: virtual aliases expanded at RCPT with DSNs naming the alias,
canonical senders, aliases for local submission, transport_maps by domain and
by address (error: bounces), per-sender relay hosts, and rewritten addresses
kept across a QMGR kill -9. The tables are written in the config (inline:),
so no file needs to be readable by the children's accounts."""
import re
import os
import signal
import smtplib
import subprocess

import pytest

from conftest import SMX, Raw, free_port, local_client, send, wait_until
from test_sendmail import local  # noqa: F401 (a fixture)

MSG = b"Subject: rewrite test\r\n\r\nthe body\r\n"


def dsns(sink):
    return [m for m in sink.messages() if m["from"] == ""]


def originals(sink):
    return [m for m in sink.messages() if m["from"] != ""]


def test_virtual_aliases_expand_and_a_dsn_names_the_alias(make_sink, make_relay):
    sink = make_sink("--dsn", "--permfail", "^bob@")
    relay = make_relay(sink.port, """
[rewrite]
virtual_alias_maps = ["inline:{ {team@example.net = alice@example.net, list@example.net}, {list@example.net = bob@example.net, alice@example.net} }"]
""")
    with smtplib.SMTP("127.0.0.1", relay.port, timeout=30) as c:
        c.ehlo("client.test")
        c.sendmail("sender@client.test", ["team@example.net"], MSG,
                   rcpt_options=["NOTIFY=FAILURE"])
    wait_until(lambda: len(dsns(sink)) == 1, 30, "the bounce for bob")
    [m] = originals(sink)
    # alice once (named twice in the expansion), bob refused by the next hop;
    # the next hop offers DSN, so it gets the ORCPT naming the alias.
    assert m["rcpts"] == ["alice@example.net"]
    assert m["rcpt_params"] == ["NOTIFY=FAILURE ORCPT=rfc822;team@example.net"]
    text = dsns(sink)[0]["data"].decode()
    assert "Final-Recipient: rfc822; bob@example.net\r\n" in text
    assert "Original-Recipient: rfc822; team@example.net\r\n" in text
    assert "Final-Recipient: rfc822; alice@example.net" not in text


def test_an_alias_loop_is_refused_at_rcpt_and_logged(sink, make_relay):
    relay = make_relay(sink.port, """
[rewrite]
virtual_alias_maps = ["inline:{ a@example.net = b@example.net, b@example.net = a@example.net, wide@example.net = {w1@example.net, w2@example.net, w3@example.net} }"]
virtual_alias_expansion_limit = 2
""")
    c = Raw(relay.port)
    assert c.cmd("EHLO client.test").startswith("250")
    assert c.cmd("MAIL FROM:<s@client.test>").startswith("250")
    assert c.cmd("RCPT TO:<a@example.net>") == "451 4.6.0 <a@example.net>: Alias expansion error"
    assert c.cmd("RCPT TO:<wide@example.net>") == \
        "451 4.6.0 <wide@example.net>: Alias expansion error"
    assert c.cmd("RCPT TO:<plain@example.net>").startswith("250")
    c.cmd("QUIT")
    c.close()
    wait_until(lambda: "NOQUEUE: reject" in relay.log_text(), 10, "the log lines")
    log = relay.log_text()
    assert "virtual_alias_maps loop for a@example.net: b@example.net -> a@example.net" in log
    assert "unreasonable virtual_alias_maps map expansion size for wide@example.net" in log
    assert "reject: RCPT from " + local_client() + ": 451 4.6.0 <a@example.net>" in log


def test_canonical_sender_and_recipient_are_rewritten_before_the_queue(sink, make_relay):
    relay = make_relay(sink.port, """
[rewrite]
sender_canonical_maps = ["inline:{ @internal.example = @public.example }"]
recipient_canonical_maps = ["inline:{ old@example.net = new@example.net }"]
recipient_delimiter = "+"
""")
    send(relay.port, "Bob+tag@Internal.example", ["old@example.net", "other@example.net"], MSG)
    wait_until(lambda: sink.count() == 1, 30, "the message")
    m = sink.messages()[0]
    assert m["from"] == "Bob+tag@public.example"
    assert sorted(m["rcpts"]) == ["new@example.net", "other@example.net"]
    wait_until(lambda: "from=<Bob+tag@public.example>" in relay.log_text(), 10, "the log line")


def test_transport_maps_by_domain_and_address_and_error_bounces(make_sink, make_relay):
    a = make_sink(sub="a")
    b = make_sink(sub="b")
    relay = make_relay(a.port, """
[queue]
transport_maps = ["inline:{ special@example.net = smtp:[127.0.0.1]:%d, example.org = smtp:[127.0.0.1]:%d, gone@example.net = error:5.1.1 left the company }"]
""" % (b.port, b.port))
    send(relay.port, "sender@client.test",
         ["normal@example.net", "special@example.net", "x@example.org", "gone@example.net"], MSG)
    wait_until(lambda: a.count() == 2 and b.count() == 1, 30, "both sinks (and the bounce)")
    assert [m["rcpts"] for m in originals(a)] == [["normal@example.net"]]
    assert sorted(originals(b)[0]["rcpts"]) == ["special@example.net", "x@example.org"]
    text = dsns(a)[0]["data"].decode()
    assert "Final-Recipient: rfc822; gone@example.net\r\n" in text
    assert "Status: 5.1.1\r\n" in text
    wait_until(lambda: "left the company" in relay.log_text(), 10, "the log line")
    relay.log_matching(re.escape("to=<gone@example.net>"))


def test_sender_dependent_relay_hosts_reach_their_sinks(make_sink, make_relay):
    a = make_sink(sub="a")
    b = make_sink(sub="b")
    c = make_sink(sub="c")
    relay = make_relay(a.port, """
[queue]
sender_dependent_relayhost_maps = ["inline:{ @brand.example = [127.0.0.1]:%d, boss@other.example = [127.0.0.1]:%d }"]
transport_maps = ["inline:{ pinned.example = smtp:[127.0.0.1]:%d }"]
""" % (b.port, c.port, a.port))
    send(relay.port, "news@brand.example", ["u@example.net"], MSG)
    send(relay.port, "boss@other.example", ["u@example.net", "v@example.net"], MSG)
    send(relay.port, "clerk@other.example", ["u@example.net"], MSG)
    # An explicit transport wins over the sender's relay host.
    send(relay.port, "news@brand.example", ["w@pinned.example"], MSG)
    wait_until(lambda: a.count() == 2 and b.count() == 1 and c.count() == 1, 30, "every sink")
    assert [m["from"] for m in b.messages()] == ["news@brand.example"]
    assert [(m["from"], sorted(m["rcpts"])) for m in c.messages()] == \
        [("boss@other.example", ["u@example.net", "v@example.net"])]
    assert sorted(m["from"] for m in a.messages()) == ["clerk@other.example", "news@brand.example"]


def test_rewritten_addresses_survive_a_qmgr_kill(tmp_path, make_sink, make_relay):
    port = free_port()  # the next hop is down at first: the mail waits in DEFEDB
    relay = make_relay(port, """
[rewrite]
virtual_alias_maps = ["inline:{ alias@example.net = {real1@example.net, real2@example.net} }"]
sender_canonical_maps = ["inline:{ me@client.test = me@public.example }"]
""")
    send(relay.port, "me@client.test", ["alias@example.net"], MSG)
    wait_until(lambda: relay.stats()["deferred"] >= 2, 20, "two deferred recipients")
    # QMGR logged (and DEFEDB holds) the expanded recipients, not the alias.
    wait_until(lambda: "to=<real1@example.net>" in relay.log_text(), 10, "the log line")
    assert "to=<alias@example.net>" not in relay.log_text()
    qmgr = relay.child_pids("smx-qmgr")
    os.kill(qmgr[0], signal.SIGKILL)
    wait_until(lambda: [p for p in relay.child_pids("smx-qmgr") if p not in qmgr], 20,
               "a new qmgr")
    back = make_sink("--port", str(port), "--dsn", sub="back")
    wait_until(lambda: relay.smx("flush", check=False).returncode == 0, 30, "QMGR taking a flush")
    wait_until(lambda: sum(len(m["rcpts"]) for m in back.messages()) == 2, 60, "both recipients")
    rcpts = sorted(r for m in back.messages() for r in m["rcpts"])
    assert rcpts == ["real1@example.net", "real2@example.net"]
    assert {m["from"] for m in back.messages()} == {"me@public.example"}
    assert {p for m in back.messages() for p in m["rcpt_params"]} == \
        {"ORCPT=rfc822;alias@example.net"}


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: local submission switches users")
def test_local_submission_is_rewritten_too(sink, local):  # noqa: F811
    lm = local("""
[rewrite]
alias_maps = ["inline:{ root = admin@example.net, postmaster = root }"]
sender_canonical_maps = ["inline:{ nobody@smx.test = robot@example.com }"]
""")
    r = lm.sendmail("postmaster", input=b"Subject: from cron\n\nhello\n")
    assert r.returncode == 0, r.stderr
    wait_until(lambda: sink.count() == 1, 30, "the message at the sink")
    m = sink.messages()[0]
    assert m["from"] == "robot@example.com"
    assert m["rcpts"] == ["admin@example.net"]
    assert lm.files() == []


@pytest.mark.parametrize("extra, key", [
    ('[rewrite]\nvirtual_alias_maps = ["texthash:/nonexistent/virtual"]', "rewrite.virtual_alias_maps"),
    ('[queue]\ntransport_maps = ["texthash:/nonexistent/transport"]', "queue.transport_maps"),
])
def test_a_table_that_cannot_be_opened_stops_the_start_naming_the_key(sink, make_relay, extra,
                                                                     key):
    relay = make_relay(sink.port, extra, start=False)
    r = subprocess.run([SMX, "run", "-c", relay.config], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0
    assert "%s: texthash:/nonexistent/" % key in r.stdout + r.stderr
