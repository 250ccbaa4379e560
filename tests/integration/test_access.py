"""SMTPS's access policy (docs/policy.md) against a real smx run and a sink:
access(5) actions at each stage, delay_reject on and off, relay_recipient_maps,
a rebuilt table taken at `smx reload`, a failed lookup, HOLD and DISCARD.

Clients connect from 127.0.0.2 and 127.0.0.3, outside relay_networks
(127.0.0.1/32 only), unless a test says otherwise."""
import os
import re
import shutil
import signal
import socket
import subprocess
import time

import pytest

from conftest import SMX, Raw, local_client, wait_until
from test_reload import reload as smx_reload

POLICY = """
[server]
relay_networks = ["127.0.0.1/32"]
relay_domains = ["example.org", "catchall.example"]
max_errors = 100
[rewrite]
recipient_delimiter = "+"
"""


class Client(Raw):
    """Raw, from a source address of our choosing (127.0.0.2: untrusted)."""

    def __init__(self, port, src="127.0.0.2"):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=10,
                                          source_address=(src, 0))
        self.buf = b""
        self.greeting = self.reply()


def policy(extra):
    return POLICY + "[policy]\n" + extra


def transaction(port, rcpts, sender="s@sender.test", helo="client.test", src="127.0.0.2",
                data=True):
    """EHLO, MAIL and each RCPT (and DATA when one was taken): the replies."""
    c = Client(port, src)
    replies = {"greeting": c.greeting, "ehlo": c.cmd("EHLO " + helo).splitlines()[-1],
               "mail": c.cmd("MAIL FROM:<%s>" % sender)}
    for r in rcpts:
        replies[r] = c.cmd("RCPT TO:<%s>" % r)
    if data and any(replies[r].startswith("250") for r in rcpts):
        assert c.cmd("DATA").startswith("354")
        replies["data"] = c.cmd("Subject: policy\r\n\r\nbody\r\n.")
    c.cmd("QUIT")
    c.close()
    return replies


def logged(relay, text):
    """Waits for text in the log (lines reach it within 250 ms)."""
    wait_until(lambda: text in relay.log_text(), 10, "the log line: " + text)


def write(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, path)


def test_each_action_at_each_stage_answered_at_rcpt(sink, make_relay, tmp_path):
    table = str(tmp_path / "recipient_access")
    write(table, "# access(5)\n"
                 "reject@example.org   REJECT\n"
                 "text@example.org     REJECT 5.7.2 not this one\n"
                 "defer@example.org    DEFER\n"
                 "code@example.org     421 come back later\n"
                 "ok@elsewhere.test    OK\n"
                 "typo@example.org     REJCET\n")
    relay = make_relay(sink.port, policy(
        'client_access = ["inline:{127.0.0.3=REJECT}"]\n'
        'helo_access = ["inline:{bad.test=DEFER helo later}"]\n'
        'sender_access = ["inline:{spam.test=REJECT, <>=550 5.7.9 no bounces}"]\n'
        'recipient_access = ["texthash:%s"]\n' % table))
    r = transaction(relay.port, ["reject@example.org", "text@example.org", "defer@example.org",
                                 "code@example.org", "ok@elsewhere.test", "typo@example.org",
                                 "fine@example.org"])
    assert r["reject@example.org"] == \
        "554 5.7.1 <reject@example.org>: Recipient address rejected: Access denied"
    assert r["text@example.org"] == \
        "554 5.7.2 <text@example.org>: Recipient address rejected: not this one"
    assert r["defer@example.org"] == \
        "450 4.7.1 <defer@example.org>: Recipient address rejected: Access denied"
    assert r["code@example.org"] == \
        "421 4.7.1 <code@example.org>: Recipient address rejected: come back later"
    # OK permits recipient_access's list only: not the relay.
    assert r["ok@elsewhere.test"] == "554 5.7.1 <ok@elsewhere.test>: Relay access denied"
    assert r["typo@example.org"] == "451 4.3.5 Server configuration error"
    assert r["fine@example.org"].startswith("250") and r["data"].startswith("250")
    wait_until(lambda: sink.count() == 1, 30, "the one message at the sink")
    assert sink.messages()[0]["rcpts"] == ["fine@example.org"]

    # delay_reject: the client, HELO and sender refusals come at RCPT.
    r = transaction(relay.port, ["u@example.org"], src="127.0.0.3")
    assert r["greeting"].startswith("220") and r["mail"].startswith("250")
    assert r["u@example.org"] == \
        "554 5.7.1 <unknown[127.0.0.3]>: Client host rejected: Access denied"
    r = transaction(relay.port, ["u@example.org"], helo="mx.bad.test")
    assert r["u@example.org"] == "450 4.7.1 <mx.bad.test>: Helo command rejected: helo later"
    r = transaction(relay.port, ["u@example.org"], sender="x@spam.test")
    assert r["u@example.org"] == "554 5.7.1 <x@spam.test>: Sender address rejected: Access denied"
    r = transaction(relay.port, ["u@example.org"], sender="")
    assert r["u@example.org"] == "550 5.7.9 <>: Sender address rejected: no bounces"

    logged(relay, "NOQUEUE: reject: RCPT from unknown[127.0.0.3]: 554 5.7.1 <unknown[127.0.0.3]>: "
           "Client host rejected: Access denied; from=<s@sender.test> to=<u@example.org> "
           "proto=ESMTP helo=<client.test>")
    assert re.search(r"warning: policy.recipient_access: key \"typo@example.org\": "
                     r"unknown action \"REJCET\"", relay.log_text())
    wait_until(lambda: relay.stats().get("rejected_5xx_access_denied") == 5, 10,
               "the access refusals counted: %s" % relay.stats())
    stats = relay.stats()
    assert stats["rejected_4xx_access_denied"] == 3
    assert stats["rejected_4xx_policy_unavailable"] == 1
    assert stats["rejected_5xx_relay_denied"] == 1


def test_without_delay_reject_each_stage_refuses_its_own_command(sink, make_relay):
    relay = make_relay(sink.port, policy(
        'delay_reject = false\n'
        'client_access = ["inline:{127.0.0.3=REJECT}"]\n'
        'helo_access = ["inline:{bad.test=REJECT}"]\n'
        'sender_access = ["inline:{spam.test=DEFER}"]\n'))
    c = Client(relay.port, "127.0.0.3")
    assert c.greeting == "554 5.7.1 <unknown[127.0.0.3]>: Client host rejected: Access denied"
    assert c.cmd("EHLO client.test") == "503 5.7.0 Error: access denied for unknown[127.0.0.3]"
    assert c.cmd("MAIL FROM:<a@b.test>").startswith("503 5.7.0")
    assert c.cmd("QUIT").startswith("221")
    c.close()

    c = Client(relay.port)
    assert c.greeting.startswith("220")
    assert c.cmd("EHLO bad.test") == "554 5.7.1 <bad.test>: Helo command rejected: Access denied"
    assert c.cmd("MAIL FROM:<a@b.test>") == "503 5.5.1 Error: send HELO/EHLO first"
    assert c.cmd("EHLO good.test").startswith("250")
    assert c.cmd("MAIL FROM:<a@spam.test>") == \
        "450 4.7.1 <a@spam.test>: Sender address rejected: Access denied"
    assert c.cmd("MAIL FROM:<a@good.test>").startswith("250")
    assert c.cmd("RCPT TO:<u@example.org>").startswith("250")
    c.cmd("QUIT")
    c.close()
    logged(relay, "NOQUEUE: reject: CONNECT from unknown[127.0.0.3]: 554 5.7.1 <unknown[127.0.0.3]>: "
           "Client host rejected: Access denied; proto=SMTP")


def test_relay_recipient_maps_refuse_unknown_recipients_at_rcpt(sink, make_relay, tmp_path):
    table = str(tmp_path / "relay_recipients")
    write(table, "alice@example.org  ok\n@catchall.example  ok\n")
    relay = make_relay(sink.port, policy('relay_recipient_maps = ["texthash:%s"]\n' % table))
    r = transaction(relay.port, ["alice@example.org", "alice+list@example.org",
                                 "anyone@catchall.example", "bob@example.org"])
    for ok in ("alice@example.org", "alice+list@example.org", "anyone@catchall.example"):
        assert r[ok].startswith("250"), r
    assert r["bob@example.org"] == ("550 5.1.1 <bob@example.org>: Recipient address rejected: "
                                    "User unknown in relay recipient table")
    # Trusted clients too, as postfix checks every recipient of relay_domains.
    r = transaction(relay.port, ["bob@example.org", "x@elsewhere.test"], src="127.0.0.1")
    assert r["bob@example.org"].startswith("550 5.1.1")
    assert r["x@elsewhere.test"].startswith("250")
    wait_until(lambda: sink.count() == 2, 30, "two messages at the sink")
    rcpts = sorted(a for m in sink.messages() for a in m["rcpts"])
    assert rcpts == ["alice+list@example.org", "alice@example.org", "anyone@catchall.example",
                     "x@elsewhere.test"]
    # The first RCPT: no queue id yet (later ones name the transaction's).
    logged(relay, "NOQUEUE: reject: RCPT from " + local_client() + ": 550 5.1.1 <bob@example.org>: "
           "Recipient address rejected: User unknown in relay recipient table; "
           "from=<s@sender.test> to=<bob@example.org> proto=ESMTP helo=<client.test>")
    wait_until(lambda: relay.stats().get("rejected_5xx_unknown_recipient") == 2, 10,
               "the unknown recipients counted")

    # Rebuilt while smx runs: used on its own once the table sees its file
    # changed (at most a second later, docs/tables.md), and after a reload.
    write(table, "alice@example.org  ok\nbob@example.org  ok\n")
    wait_until(lambda: transaction(relay.port, ["bob@example.org"])["bob@example.org"]
               .startswith("250"), 20, "the rebuilt table in use without a reload")
    smx_reload(relay)
    r = transaction(relay.port, ["bob@example.org", "anyone@catchall.example"])
    assert r["bob@example.org"].startswith("250")
    assert r["anyone@catchall.example"].startswith("550 5.1.1")

    # A table that cannot be opened: the reload is refused, the running
    # tables stay.
    os.unlink(table)
    r = relay.smx("reload", check=False)
    assert r.returncode != 0 and "policy.relay_recipient_maps" in r.stderr, r
    assert transaction(relay.port, ["bob@example.org"])["bob@example.org"].startswith("250")


def test_a_table_that_cannot_be_opened_stops_check_config_and_start(sink, make_relay, tmp_path):
    relay = make_relay(sink.port, policy('sender_access = ["hash:%s"]\n' % (tmp_path / "none")),
                       start=False)
    r = relay.smx("check-config", check=False)
    assert r.returncode != 0
    assert "policy.sender_access: hash:%s: cannot open %s.db" % (tmp_path / "none",
                                                                tmp_path / "none") in r.stderr
    p = subprocess.run([SMX, "run", "-c", relay.config], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode != 0 and "policy.sender_access" in p.stderr


@pytest.mark.skipif(shutil.which("db5.3_load") is None, reason="db5.3_load (db5.3-util) missing")
def test_a_failed_lookup_is_a_temporary_failure(sink, make_relay, tmp_path):
    # A hash: table as `smx map build` makes it, built here by Berkeley DB's
    # own db5.3_load; then cut short under the running smx.
    table = str(tmp_path / "access")
    subprocess.run(["db5.3_load", "-T", "-t", "hash", table + ".db"], check=True, text=True,
                   input="".join("user%d@example.org\nREJECT\n" % i for i in range(2000)))
    relay = make_relay(sink.port, policy('recipient_access = ["hash:%s"]\n' % table))
    r = transaction(relay.port, ["user7@example.org", "other@example.org"], data=False)
    assert r["user7@example.org"].startswith("554 5.7.1")
    assert r["other@example.org"].startswith("250")
    with open(table + ".db", "r+b") as f:
        f.truncate(4096)
    # A table looks at its file at most once a second (docs/tables.md).
    time.sleep(1.5)
    r = transaction(relay.port, ["user1999@example.org", "user1500@example.org"], data=False)
    assert r["user1999@example.org"] == \
        "451 4.3.0 <user1999@example.org>: Temporary lookup failure", r
    logged(relay, "policy.recipient_access: lookup of")
    assert sink.count() == 0


def queue_lines(relay):
    return relay.smx("queue").stdout


def test_hold_is_queued_held_and_stays_held_after_a_qmgr_kill(sink, make_relay):
    relay = make_relay(sink.port, policy(
        'sender_access = ["inline:{held@sender.test=HOLD for review}"]\n'))
    r = transaction(relay.port, ["u@example.org", "v@example.org"], sender="held@sender.test")
    assert r["data"].startswith("250 2.0.0 Ok: queued as ")
    qid = r["data"].rsplit(" ", 1)[1]
    held = "held by access policy: <held@sender.test>: Sender address for review"
    wait_until(lambda: held in queue_lines(relay), 20, "the message on hold")
    q = queue_lines(relay)
    assert qid in q and q.count("(held,") == 2, q
    logged(relay, ": hold: RCPT from unknown[127.0.0.2]: <held@sender.test>: Sender address for "
           "review; from=<held@sender.test> to=<u@example.org>")
    logged(relay, "%s: held: <held@sender.test>: Sender address for review" % qid)

    [qmgr] = relay.child_pids("smx-qmgr")
    os.kill(qmgr, signal.SIGKILL)
    wait_until(lambda: relay.child_pids("smx-qmgr") not in ([], [qmgr]), 30, "a new QMGR")
    wait_until(lambda: relay.smx("queue", check=False).returncode == 0, 30, "QMGR to answer")
    q = queue_lines(relay)
    assert held in q and q.count("(held,") == 2, q
    # A message sent after it goes out; the held one stays.
    assert transaction(relay.port, ["w@example.org"])["data"].startswith("250")
    wait_until(lambda: sink.count() == 1, 30, "the later message at the sink")
    assert sink.messages()[0]["rcpts"] == ["w@example.org"]
    assert held in queue_lines(relay)

    assert "released" in relay.smx("release", qid).stdout
    wait_until(lambda: sink.count() == 2, 30, "the released message at the sink")
    assert sorted(a for m in sink.messages() for a in m["rcpts"]) == \
        ["u@example.org", "v@example.org", "w@example.org"]


def test_discard_answers_250_and_delivers_nothing(sink, make_relay):
    relay = make_relay(sink.port, policy(
        'recipient_access = ["inline:{drop@example.org=DISCARD}"]\n'))
    r = transaction(relay.port, ["u@example.org", "drop@example.org"])
    assert r["drop@example.org"].startswith("250")
    assert r["data"].startswith("250 2.0.0 Ok: queued as ")
    qid = r["data"].rsplit(" ", 1)[1]
    # A later message overtakes nothing: once it is at the sink, the
    # discarded one would have been too.
    r = transaction(relay.port, ["u@example.org"])
    wait_until(lambda: sink.count() == 1, 30, "the second message")
    assert sink.messages()[0]["rcpts"] == ["u@example.org"]
    logged(relay, "%s: discard: RCPT from unknown[127.0.0.2]: <drop@example.org>: Recipient "
           "address triggers DISCARD action" % qid)
    logged(relay, "%s: discarded: from=<s@sender.test>" % qid)
    assert qid not in queue_lines(relay)
