"""The queue tools (issue 12, item 5): smx queue --json and its filters, smx
qshape, smx show, smx requeue, against a real relay whose next hop defers
every recipient (451 to RCPT) and a retry time far away."""
import json
import os
import re
import shutil
import subprocess
import time

import pytest

from conftest import SMX, send, wait_until
from test_privsep import as_user, dead_port, make_separate, root_only  # noqa: F401

FAR = "[queue]\nretry_min = 3600\nretry_max = 7200"


@pytest.fixture
def deferring(make_sink, make_relay):
    """A relay holding two deferred messages: m1 (a@client.test to
    x@defer.test and y@other.test) and m2 (b@client.test to z@defer.test)."""
    sink = make_sink("--tempfail-rcpt", ".")
    relay = make_relay(sink.port, FAR)
    send(relay.port, "a@client.test", ["x@defer.test", "y@other.test"],
         b"Subject: first\r\nX-Test: one\r\n\r\nbody one\r\n")
    send(relay.port, "b@client.test", ["z@defer.test"], b"Subject: second\r\n\r\nbody two\r\n")

    def all_deferred():
        q = queue_json(relay)
        states = [r["state"] for m in q["messages"] for r in m["recipients"]]
        return q if states == ["deferred"] * 3 else None
    q = wait_until(all_deferred, 30, "three deferred recipients")
    ids = {m["sender"]: m["id"] for m in q["messages"]}
    return relay, ids["a@client.test"], ids["b@client.test"]


def queue_json(relay, *args):
    return json.loads(relay.smx("queue", "--json", *args).stdout)


def test_queue_json_has_the_documented_shape(deferring):
    relay, m1, m2 = deferring
    q = queue_json(relay)
    assert (q["total"], q["listed"]) == (2, 2)
    assert q["bytes"] == sum(m["size"] for m in q["messages"])
    first = next(m for m in q["messages"] if m["id"] == m1)
    assert set(first) == {"id", "arrival", "size", "sender", "recipients"}
    assert abs(first["arrival"] - time.time()) < 120 and first["size"] > 0
    assert [r["address"] for r in first["recipients"]] == ["x@defer.test", "y@other.test"]
    for r in first["recipients"]:
        assert set(r) == {"address", "state", "attempts", "next_try", "last_reply"}
        assert r["attempts"] == 1
        assert 3000 < r["next_try"] - time.time() < 3700  # retry_min ahead
        assert r["last_reply"].startswith("451 4.2.0"), r


def test_queue_filters_by_domain_sender_and_age(deferring):
    relay, m1, m2 = deferring
    q = queue_json(relay, "--domain", "OTHER.test")
    assert [(m["id"], [r["address"] for r in m["recipients"]]) for m in q["messages"]] == \
        [(m1, ["y@other.test"])]
    q = queue_json(relay, "--domain", "defer.test")
    assert sorted(len(m["recipients"]) for m in q["messages"]) == [1, 1]
    assert queue_json(relay, "--domain", "nowhere.test")["total"] == 0
    assert [m["id"] for m in queue_json(relay, "--sender", "b@client.test")["messages"]] == [m2]
    assert queue_json(relay, "--sender", "<>")["total"] == 0
    assert queue_json(relay, "--older-than", "1h")["total"] == 0
    time.sleep(1.1)
    assert queue_json(relay, "--older-than", "1s")["total"] == 2
    # The text listing takes the same filters.
    text = relay.smx("queue", "--sender", "a@client.test", "--domain", "defer.test").stdout
    assert m1 in text and m2 not in text and "x@defer.test" in text
    assert "y@other.test" not in text and "-- 1 Kbytes in 1 requests." in text


def test_qshape_counts_recipients_by_domain_and_age(deferring):
    relay = deferring[0]
    out = relay.smx("qshape").stdout.splitlines()
    assert out[0].split() == ["T", "5", "10", "20", "40", "80", "160", "320", "640", "1280",
                              "1280+"]
    rows = {l.split()[0]: [int(n) for n in l.split()[1:]] for l in out[1:]}
    assert rows["TOTAL"] == [3, 3] + [0] * 9
    assert rows["defer.test"] == [2, 2] + [0] * 9
    assert rows["other.test"] == [1, 1] + [0] * 9
    assert out[2].split()[0] == "defer.test"  # most first
    deferred = relay.smx("qshape", "deferred").stdout.splitlines()
    assert deferred[1].split()[:2] == ["TOTAL", "3"]
    active = relay.smx("qshape", "active").stdout.splitlines()
    assert active[1].split()[:2] == ["TOTAL", "0"] and len(active) == 2
    assert relay.smx("qshape", "--sender", "b@client.test").stdout.splitlines()[1].split()[:2] == \
        ["TOTAL", "1"]


def test_show_prints_envelope_recipients_and_headers(deferring):
    relay, m1, m2 = deferring
    out = relay.smx("show", m1).stdout
    assert out.startswith("*** ENVELOPE RECORDS %s ***\n" % m1)
    assert "sender: a@client.test\n" in out
    assert "client: unknown[127.0.0.1]\n" in out
    assert re.search(r"recipient: x@defer\.test \(deferred, attempts=1, next try .* UTC\)\n"
                     r"    last reply: 451 4\.2\.0", out), out
    headers = out.split("*** HEADER RECORDS %s ***\n" % m1)[1]
    assert "Subject: first\nX-Test: one\n*** END OF MESSAGE" in headers
    assert headers.startswith("Received: ")
    assert "body one" not in out
    r = relay.smx("show", "0000000000000000F", check=False)
    assert r.returncode == 1 and "no such queue id" in r.stderr, r


def test_requeue_by_id_and_by_domain_makes_deferred_mail_due_now(deferring):
    relay, m1, m2 = deferring

    def attempts():
        return {(m["id"], r["address"]): r["attempts"]
                for m in queue_json(relay)["messages"] for r in m["recipients"]}
    r = relay.smx("requeue", m2)
    assert r.stdout == "%s: 1 deferred recipients scheduled now\n" % m2
    wait_until(lambda: attempts()[(m2, "z@defer.test")] == 2, 30, "a second attempt of m2")
    assert attempts()[(m1, "x@defer.test")] == 1
    r = relay.smx("requeue", "--domain", "other.test")
    assert r.stdout == "domain other.test: 1 deferred recipients scheduled now\n"
    wait_until(lambda: attempts()[(m1, "y@other.test")] == 2, 30, "a second attempt to other.test")
    assert attempts()[(m1, "x@defer.test")] == 1
    r = relay.smx("requeue", "0000000000000000F", check=False)
    assert r.returncode == 1 and "no deferred recipients waiting" in r.stderr, r


@pytest.mark.parametrize("args,error", [
    (["queue", "--older-than", "soon"], "--older-than: 'soon' is not an age"),
    (["queue", "--domain"], "option --domain needs a value"),
    (["qshape", "incoming"], "qshape takes active, deferred or all, not 'incoming'"),
    (["show"], "show needs a queue id"),
    (["requeue"], "requeue needs a queue id or --domain D"),
    (["requeue", "--sender", "a@b"], "--sender does not go with requeue"),
    (["flush", "--json"], "--json goes with stats and queue only"),
])
def test_bad_arguments_are_usage_errors(args, error):
    r = subprocess.run([SMX, *args], capture_output=True, text=True, timeout=30)
    assert r.returncode == 64, r  # EX_USAGE, as every usage error of smx
    assert error in r.stderr and r.stdout == "", r


@root_only
def test_requeue_and_show_need_root_or_the_admin_group(make_separate):
    relay = make_separate(dead_port(), '[server]\nstats_group = "nogroup"\nadmin_group = "adm"\n')
    smx = os.path.join(relay.tmp, "smx")
    shutil.copy(SMX, smx)
    send(relay.port, "d@client.test", ["x@example.net"], b"Subject: d\r\n\r\nx\r\n")
    q = wait_until(lambda: queue_json(relay)["messages"], 20, "the message in the queue")
    qid = q[0]["id"]
    for args in (["queue", "--json"], ["qshape"]):
        r = as_user("nobody", "nogroup", smx, *args, "-c", relay.config)
        assert r.returncode == 0 and "1" in r.stdout, r
    for args in (["requeue", qid], ["requeue", "--domain", "example.net"], ["show", qid]):
        r = as_user("nobody", "nogroup", smx, *args, "-c", relay.config)
        needs = "permission denied: %s needs root or server.admin_group" % args[0]
        assert r.returncode == 1 and needs in r.stderr, r
    r = as_user("nobody", "nogroup", smx, "show", qid, "-c", relay.config, groups=["adm"])
    assert r.returncode == 0 and "Subject: d" in r.stdout, r
