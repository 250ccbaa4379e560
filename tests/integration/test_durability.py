"""Issue 4: deferred queue, retries, bounces, crashes. Real processes, real sink."""
import os
import random
import re
import signal
import subprocess
import threading
import time

from conftest import SCALE, free_port, send, wait_until
from test_mcp import kill_under_load, run_load


def test_tempfail_three_times_then_delivered(make_sink, make_relay):
    sink = make_sink("--tempfail-first", "3")
    relay = make_relay(sink.port)
    for i in range(5):
        send(relay.port, "t%d@client.test" % i, ["x%d@example.net" % i], b"Subject: t\r\n\r\nretry me\r\n")
    # Between attempts the recipients are visible as deferred in the queue.
    listing = wait_until(lambda: (lambda out: out if "deferred" in out else None)(
        relay.smx("queue").stdout), 20, "deferred entries in smx queue")
    assert "451" in listing, listing
    wait_until(lambda: sink.count() >= 5, 60, "all 5 messages after their retries")
    assert sorted(m["from"] for m in sink.messages()) == ["t%d@client.test" % i for i in range(5)]
    wait_until(lambda: not relay.spool_files("cdb"), 20, "an empty spool")


def test_delay_warning_once_then_delivered(make_sink, make_relay):
    sink = make_sink("--tempfail-first", "4")
    relay = make_relay(sink.port, "[queue]\ndelay_warning_time = 1")
    send(relay.port, "late@client.test", ["slow@example.net"], b"Subject: slow\r\n\r\nlate\r\n")
    wait_until(lambda: sink.count() >= 2, 60, "the message and its delay warning")
    time.sleep(2)  # more retries happened meanwhile: still one warning
    msgs = sink.messages()
    orig = [m for m in msgs if m["from"] == "late@client.test"]
    warnings = [m for m in msgs if m["from"] == ""]
    assert len(orig) == 1 and len(warnings) == 1, msgs
    data = warnings[0]["data"].decode("utf-8", "replace")
    assert warnings[0]["rcpts"] == ["late@client.test"]
    assert "Action: delayed" in data and "Final-Recipient: rfc822; slow@example.net" in data
    assert "Subject: Delayed Mail" in data and "451" in data


def test_permanent_failure_bounces_exactly_those_recipients(make_sink, make_relay):
    sink = make_sink("--permfail", "^bad")
    relay = make_relay(sink.port)
    send(relay.port, "sender@client.test",
         ["good1@example.net", "bad1@example.net", "bad2@example.net", "good2@example.net"],
         b"Subject: partly bad\r\nMessage-ID: <pb@client.test>\r\n\r\nbody\r\n")
    wait_until(lambda: sink.count() >= 2, 30, "the message and its DSN")
    msgs = sink.messages()
    orig = [m for m in msgs if m["from"] == "sender@client.test"]
    dsns = [m for m in msgs if m["from"] == ""]
    assert len(orig) == 1 and sorted(orig[0]["rcpts"]) == ["good1@example.net", "good2@example.net"]
    assert len(dsns) == 1, msgs
    dsn = dsns[0]
    assert dsn["rcpts"] == ["sender@client.test"]
    data = dsn["data"].decode("utf-8", "replace")
    assert "multipart/report" in data and "report-type=delivery-status" in data
    finals = sorted(re.findall(r"Final-Recipient: rfc822;\s*(\S+)", data))
    assert finals == ["bad1@example.net", "bad2@example.net"], data
    assert "Action: failed" in data and "Status: 5.1.1" in data
    assert "Message-ID: <pb@client.test>" in data  # the original headers ride along
    time.sleep(1)
    assert len(sink.messages()) == 2  # exactly one DSN


def test_null_sender_is_never_bounced(make_sink, make_relay):
    sink = make_sink("--permfail", ".")
    relay = make_relay(sink.port)
    send(relay.port, "", ["x@example.net"], b"Subject: bounce of a bounce\r\n\r\nx\r\n")
    wait_until(lambda: "bounced" in relay.log_text(), 20, "the bounce log line")
    time.sleep(1.5)
    assert sink.count() == 0
    wait_until(lambda: not relay.spool_files("cdb"), 20, "an empty spool")


def test_next_hop_down_then_back_with_qmgr_restart(tmp_path, make_sink, make_relay):
    port = free_port()  # nothing listens there yet: the next hop is down
    relay = make_relay(port)
    n = max(20, int(100 * SCALE))
    for i in range(n):
        send(relay.port, "d%d@client.test" % i, ["x@example.net"], b"Subject: d\r\n\r\nwait\r\n")
    wait_until(lambda: relay.stats()["deferred"] >= 1, 20, "deferrals")
    qmgr = relay.child_pids("smx-qmgr")
    os.kill(qmgr[0], signal.SIGKILL)
    wait_until(lambda: [p for p in relay.child_pids("smx-qmgr") if p not in qmgr], 20,
               "a new qmgr")
    back = make_sink("--port", str(port), sub="back")
    # The new QMGR's pid shows before its control socket is bound.
    wait_until(lambda: relay.smx("flush", check=False).returncode == 0, 30, "QMGR taking a flush")
    wait_until(lambda: back.count() >= n, 90, "every message after the next hop came back")
    froms = sorted(m["from"] for m in back.messages())
    assert set(froms) == {"d%d@client.test" % i for i in range(n)}
    wait_until(lambda: not relay.spool_files("cdb"), 30, "an empty spool")


def test_hold_release_delete(make_sink, make_relay):
    sink = make_sink("--tempfail-first", "1000")
    relay = make_relay(sink.port)
    send(relay.port, "h@client.test", ["x@example.net"], b"Subject: h\r\n\r\nheld\r\n")
    out = wait_until(lambda: (lambda o: o if "h@client.test" in o else None)(relay.smx("queue").stdout),
                     20, "the message in smx queue")
    qid = re.search(r"\b([0-9A-F]{17})\b", out).group(1)
    relay.smx("hold", qid)
    assert "held" in relay.smx("queue").stdout
    relay.smx("release", qid)
    relay.smx("delete", qid)
    wait_until(lambda: qid not in relay.smx("queue").stdout, 20, "the id to leave the queue")
    wait_until(lambda: not relay.spool_files("cdb"), 20, "the content file to go")
    r = relay.smx("hold", "00000000000000000", check=False)
    assert r.returncode != 0 and "no such" in r.stderr.lower()


def test_crashes_lose_nothing_that_got_250(make_sink, make_relay):
    """kill -9 of QMGR, SMTPS, SMTPC or all of them at random moments under load."""
    sink = make_sink()
    relay = make_relay(sink.port, "[queue]\norphan_age = 10")
    per_session = max(10, int(100 * SCALE))  # 50 sessions: 5000 messages at scale 1
    result = {}
    load = threading.Thread(target=lambda: result.setdefault("acc", run_load(relay, 50, per_session, "cr")))
    load.start()
    kills = kill_under_load(relay, load, random.Random(4), 6,
                            [["smx-qmgr"], ["smx-smtps"], ["smx-smtpc"],
                             ["smx-qmgr", "smx-smtps", "smx-smtpc"]], (0.5, 1.5))
    load.join(600)
    accepted = set(result["acc"])
    wait_until(lambda: {m["from"] for m in sink.messages()} >= accepted, 180,
               "every message that got a 250")
    froms = [m["from"] for m in sink.messages()]
    lost = accepted - set(froms)
    dupes = len(froms) - len(set(froms))
    print("crash test: %d kills, %d accepted, %d lost, %d duplicates" % (kills, len(accepted), len(lost), dupes))
    assert not lost
    wait_until(lambda: relay.stats()["queue_size"] == 0, 60, "an empty active queue")
    wait_until(lambda: "in 0 requests" in relay.smx("queue").stdout, 60,
               "no deferred recipients left in DEFEDB")
    # Content files no transaction names are orphans: of messages whose
    # sender never got a 250 (SMTPS or QMGR killed mid-commit), or of
    # delivered ones (QMGR killed between ta_done and the unlink). The sweep
    # moves them to quarantine once they are orphan_age (10 s here) old.
    left = len(relay.spool_files("cdb"))
    wait_until(lambda: not relay.spool_files("cdb"), 60, "no content file left")
    print("crash test: %d orphan content files swept into quarantine" % left)
    relay.stop()
    assert not relay.spool_files("ibdb")
