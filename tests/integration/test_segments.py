"""Content segments (docs/design.md, "Content segments"): small messages share
a segment file instead of a file each; large ones keep files; a deferred
message is copied out before DEFEDB names it; recovery checks every record
it brings back; a segment goes once nothing names it. Real processes, real
files, the integration fixture's test_segment_age of 6 s."""
import glob
import os
import re
import signal

from conftest import send, wait_until


def segments(relay):
    return sorted(glob.glob(os.path.join(relay.spool, "cdb", "segments", "*.seg")))


def content_files(relay):
    return [f for f in relay.spool_files("cdb") if not f.endswith(".seg")]


def hold(sink):
    os.kill(sink.proc.pid, signal.SIGSTOP)


def release(sink):
    os.kill(sink.proc.pid, signal.SIGCONT)


def test_small_messages_share_a_segment_and_it_goes(make_sink, make_relay):
    sink = make_sink()
    relay = make_relay(sink.port)
    hold(sink)  # deliveries wait: the content must still be there
    try:
        bodies = {}
        for i in range(20):
            bodies["s%d@client.test" % i] = b"Subject: seg %d\r\n\r\n" % i + b"line\r\n" * (i * 40)
            send(relay.port, "s%d@client.test" % i, ["r%d@example.net" % i],
                 bodies["s%d@client.test" % i])
        assert segments(relay), "no content segment"
        assert content_files(relay) == [], "small messages got files of their own"
    finally:
        release(sink)
    wait_until(lambda: sink.count() >= 20, 30, "all 20 messages")
    got = {m["from"]: m["data"] for m in sink.messages()}
    for sender, body in bodies.items():
        assert got[sender].endswith(body), "message from %s not byte-exact" % sender
    # Nothing names them any more: gone within test_segment_age and a sweep.
    wait_until(lambda: not relay.spool_files("cdb"), 30, "the segments to go")
    assert "TA_COMMIT deferred" not in relay.log_text()
    # And no process keeps one open, so its space is free: SMTPS lets a
    # segment go when its time to take messages is up, QMGR and SMTPC when
    # they no longer read it.
    wait_until(lambda: not deleted_segments_open(relay), 5, "removed segments to be closed")


def deleted_segments_open(relay):
    held = []
    for name in ("smx-smtps", "smx-qmgr", "smx-smtpc"):
        for pid in relay.child_pids(name):
            fd_dir = "/proc/%d/fd" % pid
            for fd in os.listdir(fd_dir):
                try:
                    target = os.readlink(os.path.join(fd_dir, fd))
                except OSError:
                    continue
                if ".seg" in target and target.endswith("(deleted)"):
                    held.append((name, target))
    return held


def test_a_large_message_keeps_a_file_of_its_own(make_sink, make_relay):
    sink = make_sink()
    relay = make_relay(sink.port)
    hold(sink)
    try:
        body = b"Subject: big\r\n\r\n" + (b"0123456789abcdef" * 4 + b"\r\n") * 8000  # 528 KB
        send(relay.port, "big@client.test", ["r@example.net"], body)
        assert len(content_files(relay)) == 1
    finally:
        release(sink)
    wait_until(lambda: sink.count() >= 1, 30, "the large message")
    assert sink.messages()[0]["data"].endswith(body)
    wait_until(lambda: not relay.spool_files("cdb"), 30, "an empty content store")


def test_a_deferred_message_is_copied_out_of_its_segment(make_sink, make_relay):
    sink = make_sink("--tempfail-rcpt", "^later")
    relay = make_relay(sink.port)
    body = b"Subject: copy\r\n\r\n" + b"deferred body\r\n" * 100
    send(relay.port, "c@client.test", ["now@example.net", "later@example.net"], body)
    wait_until(lambda: sink.count() >= 1, 30, "the recipient that takes it")
    # The other one waits in DEFEDB, whose envelope names a copy: a content
    # file named by the transaction id, the message byte for byte.
    copies = wait_until(lambda: content_files(relay), 30, "the DEFEDB copy")
    assert len(copies) == 1
    ta_id = os.path.basename(copies[0])
    with open(copies[0], "rb") as f:
        copy = f.read()
    assert copy.endswith(body) and b"Received: " in copy
    assert ta_id in relay.smx("queue").stdout
    # The segment goes (nothing in memory names it), the copy stays.
    wait_until(lambda: not segments(relay), 30, "the segment to go")
    assert content_files(relay) == copies
    # Deleted, the copy goes too.
    relay.smx("delete", ta_id)
    wait_until(lambda: not relay.spool_files("cdb"), 20, "the copy to go")


def test_retries_are_delivered_from_the_copy(make_sink, make_relay):
    sink = make_sink("--tempfail-first", "2")
    relay = make_relay(sink.port)
    body = b"Subject: retry\r\n\r\n" + (b"x" * 70 + b"\r\n") * 100
    send(relay.port, "r@client.test", ["x@example.net"], body)
    wait_until(lambda: sink.count() >= 1, 60, "the message after its retries")
    assert sink.messages()[0]["data"].endswith(body)
    wait_until(lambda: not relay.spool_files("cdb"), 30, "an empty content store")


def test_recovery_checks_each_record_and_quarantines_a_bad_one(make_sink, make_relay):
    sink = make_sink()
    relay = make_relay(sink.port)
    hold(sink)
    try:
        for i in range(3):
            send(relay.port, "k%d@client.test" % i, ["r%d@example.net" % i],
                 b"Subject: k%d\r\n\r\nrecord %d\r\n" % (i, i))
        active = re.compile(r"([0-9A-F]{17}): from=<k(\d)@client.test>.*\(queue active\)")
        ids = wait_until(lambda: (lambda found: found if len(found) == 3 else None)(
            {int(m.group(2)): m.group(1) for m in active.finditer(relay.log_text())}), 20,
            "3 transactions in the active queue")
        # Killed outright: the three come back from the IBDB at the restart.
        children = [p for n in ("smx-qmgr", "smx-smtps", "smx-smtpc") for p in relay.child_pids(n)]
        os.kill(relay.proc.pid, signal.SIGKILL)
        relay.proc.wait()
        for p in children:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        wait_until(lambda: not any(os.path.exists("/proc/%d" % p) for p in children), 20,
                   "the relay's processes to exit")
        # Flip one byte of the second message's data in its segment.
        flipped = 0
        for seg in segments(relay):
            with open(seg, "r+b") as f:
                data = f.read()
                if b"record 1" in data:
                    f.seek(data.index(b"record 1"))
                    f.write(b"R")
                    flipped += 1
        assert flipped == 1
        relay.start()
    finally:
        release(sink)
    wait_until(lambda: sink.count() >= 2, 30, "the two intact messages")
    assert sorted(m["from"] for m in sink.messages()) == ["k0@client.test", "k2@client.test"]
    log = relay.log_text()
    assert "%s: content segment record" % ids[1] in log and "at recovery" in log, log
    qdir = os.path.join(relay.spool, "quarantine")
    with open(os.path.join(qdir, "cdb-%s" % ids[1]), "rb") as f:
        assert b"Record 1" in f.read()
    assert os.path.exists(os.path.join(qdir, "%s.envelope" % ids[1]))
