"""The queue tools (issue 12, item 5; issue 26, item 6): smx queue --json
(a line per message, postqueue -j's fields) and its filters, smx qshape,
smx show [--body], smx requeue, smx flush [DOMAIN], hold/release/delete
with several ids, - and ALL [QUEUE] as postsuper takes them, smx help,
against a real relay whose next hop defers every recipient (451 to RCPT)
and a retry time far away."""
import json
import os
import re
import shutil
import subprocess
import time

import pytest

from conftest import SMX, local_client, send, wait_until
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
        states = [r["state"] for m in q for r in m["recipients"]]
        return q if states == ["deferred"] * 3 else None
    q = wait_until(all_deferred, 30, "three deferred recipients")
    ids = {m["sender"]: m["queue_id"] for m in q}
    return relay, ids["a@client.test"], ids["b@client.test"]


def queue_json(relay, *args):
    """`smx queue --json`: a JSON object a line, as postqueue -j."""
    return [json.loads(line) for line in relay.smx("queue", "--json", *args).stdout.splitlines()]


def queue_ids(relay):
    return {m["queue_id"]: m["queue_name"] for m in queue_json(relay)}


def test_queue_json_has_postqueue_j_fields_one_message_a_line(deferring):
    relay, m1, m2 = deferring
    out = relay.smx("queue", "--json").stdout
    assert out.count("\n") == 2 and out.endswith("}\n")
    q = queue_json(relay)
    assert [m["queue_id"] for m in q] == sorted([m1, m2])
    first = next(m for m in q if m["queue_id"] == m1)
    assert list(first) == ["queue_name", "queue_id", "arrival_time", "message_size",
                           "forced_expire", "sender", "recipients"]
    assert first["queue_name"] == "deferred" and first["forced_expire"] is False
    assert abs(first["arrival_time"] - time.time()) < 120 and first["message_size"] > 0
    assert first["sender"] == "a@client.test"
    assert [r["address"] for r in first["recipients"]] == ["x@defer.test", "y@other.test"]
    for r in first["recipients"]:
        assert list(r) == ["address", "delay_reason", "state", "attempts", "next_try"]
        assert r["delay_reason"].startswith("451 4.2.0"), r
        assert r["state"] == "deferred" and r["attempts"] == 1
        assert 3000 < r["next_try"] - time.time() < 3700  # retry_min ahead
    relay.smx("hold", m2)
    assert queue_ids(relay) == {m1: "deferred", m2: "hold"}
    held = next(m for m in queue_json(relay) if m["queue_id"] == m2)["recipients"][0]
    assert (held["state"], held["next_try"]) == ("held", None)


def test_queue_filters_by_domain_sender_and_age(deferring):
    relay, m1, m2 = deferring
    q = queue_json(relay, "--domain", "OTHER.test")
    assert [(m["queue_id"], [r["address"] for r in m["recipients"]]) for m in q] == \
        [(m1, ["y@other.test"])]
    q = queue_json(relay, "--domain", "defer.test")
    assert sorted(len(m["recipients"]) for m in q) == [1, 1]
    assert queue_json(relay, "--domain", "nowhere.test") == []
    assert [m["queue_id"] for m in queue_json(relay, "--sender", "b@client.test")] == [m2]
    assert queue_json(relay, "--sender", "<>") == []
    assert queue_json(relay, "--older-than", "1h") == []
    time.sleep(1.1)
    assert len(queue_json(relay, "--older-than", "1s")) == 2
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
    assert "client: %s\n" % local_client() in out
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
        return {(m["queue_id"], r["address"]): r["attempts"]
                for m in queue_json(relay) for r in m["recipients"]}
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


def test_flush_domain_retries_that_domain_only(deferring):
    relay, m1, m2 = deferring

    def attempts():
        return {(m["queue_id"], r["address"]): r["attempts"]
                for m in queue_json(relay) for r in m["recipients"]}
    r = relay.smx("flush", "other.test")
    assert r.stdout == "domain other.test: 1 deferred recipients scheduled now\n"
    wait_until(lambda: attempts()[(m1, "y@other.test")] == 2, 30, "a second attempt to other.test")
    assert attempts()[(m1, "x@defer.test")] == 1 and attempts()[(m2, "z@defer.test")] == 1
    assert relay.smx("flush").stdout == "3 deferred recipients scheduled now\n"


def test_hold_release_delete_take_several_ids(deferring):
    relay, m1, m2 = deferring
    r = relay.smx("hold", m1, m2)
    assert r.stdout == "%s: held (2 recipients)\n%s: held (1 recipients)\n" % (m1, m2)
    assert queue_ids(relay) == {m1: "hold", m2: "hold"}
    assert relay.smx("release", m2, m1).stdout == \
        "%s: released (1 recipients)\n%s: released (2 recipients)\n" % (m2, m1)
    assert queue_ids(relay) == {m1: "deferred", m2: "deferred"}
    # An id no longer queued: said, exit 1, and the others are done.
    gone = "0000000000000000F"
    r = relay.smx("delete", m1, gone, check=False)
    assert r.returncode == 1, r
    assert r.stdout == "%s: deleted (2 recipients)\n" % m1
    assert r.stderr == "smx: delete: %s: no such queue id\n" % gone
    assert queue_ids(relay) == {m2: "deferred"}
    r = relay.smx("delete", gone, check=False)
    assert (r.returncode, r.stdout, r.stderr) == (1, "", "smx: delete: %s: no such queue id\n" % gone)


def test_ids_on_standard_input_as_postsuper_reads_them(deferring):
    relay, m1, m2 = deferring
    # postfix's idiom: mailq | tail -n +2 | awk 'BEGIN { RS = "" } /@defer\.test/ { print $1 }'
    # | tr -d '*!' | postsuper -d -
    pipe = ("%s queue -c %s | tail -n +2 | awk 'BEGIN { RS = \"\" } /@other\\.test/ { print $1 }' "
            "| %s delete - -c %s" % (SMX, relay.config, SMX, relay.config))
    r = subprocess.run(["bash", "-o", "pipefail", "-c", pipe], capture_output=True, text=True,
                       timeout=60)
    assert (r.returncode, r.stdout, r.stderr) == (0, "%s: deleted (2 recipients)\n" % m1, ""), r
    assert queue_ids(relay) == {m2: "deferred"}

    # More ids than one request takes (1000): sent in several; bad lines
    # are skipped with a warning, postfix's marks taken off.
    unknown = ["%016X1" % i for i in range(2500)]
    lines = unknown[:1200] + [m2 + "!", "not an id", ""] + unknown[1200:]
    r = subprocess.run([SMX, "hold", "-", "-c", relay.config], input="\n".join(lines) + "\n",
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert r.stdout == "%s: held (1 recipients)\n" % m2
    err = r.stderr.splitlines()
    assert "smx: hold: line 1202: 'not an id' is not a queue id; skipped" in err
    assert [l for l in err if "skipped" not in l] == \
        ["smx: hold: %s: no such queue id" % i for i in unknown]
    assert queue_ids(relay) == {m2: "hold"}


def test_all_and_a_queue_name_as_postsuper_takes_them(deferring, make_sink):
    relay, m1, m2 = deferring
    relay.smx("hold", m1)
    # ALL deferred: the deferred messages, not the held one.
    assert relay.smx("delete", "ALL", "deferred").stdout == "1 messages deleted (1 recipients)\n"
    assert queue_ids(relay) == {m1: "hold"}
    # ALL for release: the held ones; ALL for hold: those not held.
    assert relay.smx("release", "ALL").stdout == "1 messages released (2 recipients)\n"
    assert relay.smx("hold", "ALL").stdout == "1 messages held (2 recipients)\n"
    assert relay.smx("hold", "ALL").stdout == "0 messages held (0 recipients)\n"
    assert relay.smx("delete", "ALL", "active").stdout == "0 messages deleted (0 recipients)\n"
    assert relay.smx("delete", "ALL", "hold").stdout == "1 messages deleted (2 recipients)\n"
    assert queue_json(relay) == []
    assert relay.smx("delete", "ALL").stdout == "0 messages deleted (0 recipients)\n"


def test_show_body_prints_the_whole_message(deferring):
    relay, m1, m2 = deferring
    out = relay.smx("show", "--body", m1).stdout
    envelope, rest = out.split("*** MESSAGE CONTENTS %s ***\n" % m1)
    assert envelope.startswith("*** ENVELOPE RECORDS %s ***\n" % m1)
    assert "sender: a@client.test\n" in envelope and "HEADER RECORDS" not in envelope
    assert rest.startswith("Received: ")
    assert rest.endswith("Subject: first\nX-Test: one\n\nbody one\n*** END OF MESSAGE %s ***\n" % m1)
    assert "\r" not in rest
    # Past one page of the CTL protocol (1 MiB): every byte, in order.
    body = b"".join(b"line %07d of a long body\r\n" % i for i in range(100000))
    send(relay.port, "c@client.test", ["w@defer.test"], b"Subject: long\r\n\r\n" + body)
    big = wait_until(lambda: [m["queue_id"] for m in queue_json(relay, "--sender", "c@client.test")
                              if m["recipients"][0]["state"] == "deferred"], 30, "the long one")[0]
    out = relay.smx("show", "--body", big).stdout
    assert out.endswith("Subject: long\n\n" + body.decode().replace("\r\n", "\n") +
                        "*** END OF MESSAGE %s ***\n" % big)
    r = relay.smx("show", "--body", "0000000000000000F", check=False)
    assert r.returncode == 1 and r.stderr == "smx: show: no such queue id\n", r


def test_help_for_each_command():
    r = subprocess.run([SMX, "help", "delete"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stdout.startswith("usage: smx delete ID... | - | ALL [QUEUE]"), r
    assert "postsuper" in r.stdout
    r2 = subprocess.run([SMX, "delete", "--help"], capture_output=True, text=True, timeout=30)
    assert r2.stdout == r.stdout
    usage = subprocess.run([SMX, "--help"], capture_output=True, text=True, timeout=30).stdout
    for c in re.findall(r"^  ([a-z-]+)", usage.split("commands:")[1].split("options:")[0],
                        flags=re.M):
        r = subprocess.run([SMX, "help", c], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0 and r.stdout.startswith("usage: smx " + c), (c, r)


@pytest.mark.parametrize("args,error", [
    (["queue", "--older-than", "soon"], "--older-than: 'soon' is not an age"),
    (["queue", "--domain"], "option --domain needs a value"),
    (["qshape", "incoming"], "qshape takes active, deferred or all, not 'incoming'"),
    (["show"], "show needs a queue id"),
    (["requeue"], "requeue needs a queue id or --domain D"),
    (["requeue", "--sender", "a@b"], "--sender does not go with requeue"),
    (["flush", "--json"], "--json goes with stats and queue only"),
    (["flush", "a@example.net"], "flush: 'a@example.net' is not a domain"),
    (["delete", "ALL", "incoming"], "delete: 'incoming' is not a queue (active, deferred or hold)"),
    (["hold", "6B035578AF0E7000"], "hold: '6B035578AF0E7000' is not a queue id"),
    (["release", "-", "-"], "release: - (standard input) given twice"),
    (["queue", "--body"], "--body goes with show only"),
    (["help", "mailq"], "help: unknown command 'mailq'"),
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
    q = wait_until(lambda: queue_json(relay), 20, "the message in the queue")
    qid = q[0]["queue_id"]
    for args in (["queue", "--json"], ["qshape"]):
        r = as_user("nobody", "nogroup", smx, *args, "-c", relay.config)
        assert r.returncode == 0 and "1" in r.stdout, r
    for args in (["requeue", qid], ["requeue", "--domain", "example.net"], ["show", qid]):
        r = as_user("nobody", "nogroup", smx, *args, "-c", relay.config)
        needs = "permission denied: %s needs root or server.admin_group" % args[0]
        assert r.returncode == 1 and needs in r.stderr, r
    r = as_user("nobody", "nogroup", smx, "show", qid, "-c", relay.config, groups=["adm"])
    assert r.returncode == 0 and "Subject: d" in r.stdout, r
