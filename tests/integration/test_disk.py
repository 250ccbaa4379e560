"""Issue 4 item 4: disk full and intake limits, for real.

The spool lives on a small tmpfs that the test mounts (root only; skipped
otherwise). A next hop that holds mail is a sink stopped with SIGSTOP: the
kernel still accepts SMTPC's connections, the greeting just never comes
(client.command_timeout is far longer than a test), and SIGCONT lets it
take everything.
"""
import errno
import os
import re
import signal
import smtplib
import subprocess
import threading
import time

import pytest

from conftest import content_files, free_port, segment_records, wait_until

FS_SIZE = 16 << 20
RESERVE = 4 << 20  # QMGR's emergency reserve file (qmgr/disk_space.hpp)
CHILDREN = ("smx-qmgr", "smx-smtps", "smx-smtpc")


@pytest.fixture
def mount_tmpfs():
    """mount(path, size): a tmpfs there; all are unmounted afterwards, last first."""
    mounted = []

    def mount(path, size):
        if os.geteuid() != 0:
            pytest.skip("mounting a tmpfs for the spool needs root")
        os.makedirs(path, exist_ok=True)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%d" % size, "tmpfs", path],
                           capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip("cannot mount a tmpfs for the spool: %s" % (r.stderr.strip() or r.returncode))
        mounted.append(path)
        return path

    yield mount
    for path in reversed(mounted):
        if subprocess.run(["umount", path], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", path], capture_output=True)


@pytest.fixture
def tmpfs(tmp_path, mount_tmpfs):
    """A FS_SIZE tmpfs at tmp_path/fs."""
    return mount_tmpfs(str(tmp_path / "fs"), FS_SIZE)


@pytest.fixture
def make_disk_relay(tmpfs, make_relay):
    """make_relay with the spool on the tmpfs (torn down before the unmount)."""
    def make(sink_port, extra=""):
        spool = os.path.join(tmpfs, "spool")
        r = make_relay(sink_port, "[queue]\nspool_dir = \"%s\"\n%s" % (spool, extra), start=False)
        r.spool = spool
        return r.start()
    return make


@pytest.fixture
def held_sinks():
    """Sinks stopped with SIGSTOP; every one is continued at teardown so it can stop."""
    held = []

    def hold(sink):
        os.kill(sink.proc.pid, signal.SIGSTOP)
        held.append(sink)

    yield hold
    for s in held:
        if s.proc.poll() is None:
            os.kill(s.proc.pid, signal.SIGCONT)


def release(sink):
    os.kill(sink.proc.pid, signal.SIGCONT)


def free_bytes(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def message(tag, size):
    line = b"x" * 76 + b"\r\n"
    return (b"Subject: disk " + tag.encode() + b"\r\n\r\n" + line * (size // len(line)))


def try_send(c, sender, rcpts, body):
    """(code, text) of the final reply for one message on connection c."""
    try:
        refused = c.sendmail(sender, rcpts, body)
        assert not refused, refused
        return 250, ""
    except smtplib.SMTPDataError as e:
        return e.smtp_code, e.smtp_error.decode(errors="replace")
    except smtplib.SMTPRecipientsRefused as e:
        code, text = next(iter(e.recipients.values()))
        return code, text.decode(errors="replace")
    except smtplib.SMTPResponseException as e:
        return e.smtp_code, e.smtp_error.decode(errors="replace")
    except (smtplib.SMTPServerDisconnected, OSError) as e:
        return 0, "connection lost: %s" % e


def send_one(relay, sender, rcpts, body):
    with smtplib.SMTP("127.0.0.1", relay.port, timeout=30) as c:
        c.ehlo("client.test")
        return try_send(c, sender, rcpts, body)


def pids(relay):
    return {name: sorted(relay.child_pids(name)) for name in CHILDREN}


def content_state(relay):
    """Content files (not segments) and .tmp files."""
    files = content_files(os.path.join(relay.spool, "cdb"))
    return [f for f in files if not f.endswith(".tmp")], [f for f in files if f.endswith(".tmp")]


def assert_delivered_once(sink, accepted, refused):
    froms = [m["from"] for m in sink.messages()]
    assert sorted(froms) == sorted(accepted), "lost: %s, extra: %s" % (
        set(accepted) - set(froms), [f for f in froms if froms.count(f) > 1 or f not in accepted])
    assert not set(froms) & set(refused), "a message answered 452 was delivered"


def test_disk_full_answers_452_and_stores_nothing_half(make_sink, held_sinks, make_disk_relay):
    sink = make_sink()
    held_sinks(sink)
    relay = make_disk_relay(sink.port, "min_free_space = 0")
    before = pids(relay)
    replies, lock = [], threading.Lock()
    n_clients = 4
    # Enough to fill FS_SIZE several times over; each client stops after a few 452s.
    per_client = int(3 * FS_SIZE / (300 << 10) / n_clients) + 1

    def client(k):
        full = 0
        with smtplib.SMTP("127.0.0.1", relay.port, timeout=30) as c:
            c.ehlo("client.test")
            for i in range(per_client):
                sender = "full-%d-%d@client.test" % (k, i)
                size = (200 << 10) + ((k * 7919 + i * 104729) % (200 << 10))
                code, text = try_send(c, sender, ["x@example.net"], message(sender, size))
                with lock:
                    replies.append((sender, code, text))
                if code != 250:
                    full += 1
                    if full == 3:
                        return

    threads = [threading.Thread(target=client, args=(k,)) for k in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a client hung"
    accepted = [s for s, code, _ in replies if code == 250]
    refused = [s for s, code, _ in replies if code != 250]
    bad = [(s, code, text) for s, code, text in replies
           if code != 250 and not (code == 452 and text.startswith("4.3.1"))]
    assert not bad, bad
    assert len(refused) == 3 * n_clients, "the disk never filled: %d accepted" % len(accepted)
    assert accepted, "nothing was accepted"
    # Log lines reach the file within a second (the log thread flushes then).
    wait_until(lambda: "No space left on device" in relay.log_text(), 10, "the ENOSPC line")
    # Nothing half-stored: one complete content per 250 (a content file, or
    # for the smaller messages a whole segment record), no temporary file.
    files, tmps = content_state(relay)
    assert not tmps, tmps
    # (A record written whole whose envelope the full disk then refused
    # stays unnamed in its segment: SMTPS logged its 452.)
    refused_ids = set(re.findall(r"([0-9A-F]{17}): reject: END-OF-MESSAGE from \S+: 4",
                                 relay.log_text()))
    records = set(segment_records(os.path.join(relay.spool, "cdb"))) - refused_ids
    assert len(files) + len(records) == len(accepted), (len(files), len(records), len(accepted))
    assert not relay.spool_files("quarantine")
    assert pids(relay) == before, "a process died while the disk was full"
    assert relay.stats()["received"] == len(accepted)

    release(sink)
    wait_until(lambda: sink.count() >= len(accepted), 60, "every accepted message at the sink")
    wait_until(lambda: not relay.spool_files("cdb"), 30, "an empty spool")
    time.sleep(1)  # a duplicate would show up now
    assert_delivered_once(sink, accepted, refused)
    assert send_one(relay, "after@client.test", ["x@example.net"], message("after", 300 << 10))[0] == 250
    wait_until(lambda: sink.count() > len(accepted), 30, "the message sent after the drain")
    assert pids(relay) == before


def test_free_space_threshold_refuses_what_does_not_fit(tmpfs, make_sink, held_sinks,
                                                        make_disk_relay):
    threshold = FS_SIZE // 2
    size = 300 << 10
    sink = make_sink()
    held_sinks(sink)
    relay = make_disk_relay(sink.port, "min_free_space = %d" % threshold)
    accepted, refused = [], []

    def send(tag):
        code, text = send_one(relay, tag, ["x@example.net"], message(tag, size))
        (accepted if code == 250 else refused).append(tag)
        return code, text

    # A declared SIZE that would take the spool below the threshold, by one
    # byte, is refused at MAIL, before any data is sent.
    with smtplib.SMTP("127.0.0.1", relay.port, timeout=30) as c:
        c.ehlo("client.test")
        code, text = c.mail("big@client.test", ["SIZE=%d" % (free_bytes(tmpfs) - threshold + 1)])
        assert (code, text) == (452, b"4.3.1 Insufficient system storage")
        assert c.mail("small@client.test", ["SIZE=%d" % size])[0] == 250
    # Every message is checked against the free space of that moment (with
    # what is being written besides), not a sample: 250 while one fits, then
    # 452 (smtplib declares SIZE: at MAIL), with the threshold still free.
    # Free space only shrinks while the next hop holds the mail.
    while True:
        code, text = send("m-%d@client.test" % len(accepted))
        if code != 250:
            break
        assert len(accepted) < FS_SIZE // size, "free space does not shrink"
    assert (code, text.split(" ")[0]) == (452, "4.3.1"), (code, text)
    assert "Insufficient system storage" in text
    # (The log thread may write the line a moment after the reply.)
    wait_until(lambda: "reject: MAIL from" in relay.log_text(), 10, "SMTPS's reject line")
    # Within one message (and its header lines) of the threshold, and not
    # below it but for the pages of the envelopes QMGR logged.
    assert threshold - (256 << 10) < free_bytes(tmpfs) < threshold + size + (4 << 10)
    stored = len(relay.spool_files("cdb"))
    assert send("again@client.test")[0] == 452
    assert len(relay.spool_files("cdb")) == stored
    assert "No space left on device" not in relay.log_text()

    release(sink)
    wait_until(lambda: sink.count() >= len(accepted), 30, "every accepted message at the sink")
    wait_until(lambda: not relay.spool_files("cdb"), 30, "an empty spool")
    assert send("resumed@client.test") == (250, "")
    wait_until(lambda: sink.count() >= len(accepted), 30, "the last message at the sink")
    assert_delivered_once(sink, accepted, refused)


def test_active_queue_limit(make_sink, held_sinks, make_relay):
    sink = make_sink()
    held_sinks(sink)
    relay = make_relay(sink.port, "[queue]\naq_max_entries = 5\nmin_free_space = 0")
    body = b"Subject: aq\r\n\r\nqueued\r\n"
    accepted, refused = [], []
    for i in range(5):
        assert send_one(relay, "aq-%d@client.test" % i, ["x@example.net"], body) == (250, "")
        accepted.append("aq-%d@client.test" % i)
    for sender, rcpts in (("over-1@client.test", ["x@example.net"]),
                          ("over-2@client.test", ["x@example.net", "y@example.net"])):
        code, text = send_one(relay, sender, rcpts, body)
        assert (code, text.split(" ")[0]) == (452, "4.3.1"), (code, text)
        refused.append(sender)
    wait_until(lambda: relay.log_text().count("TA_COMMIT deferred: queue full") == 2, 10,
               "two queue-full lines")
    # The refused content is gone again (a refused record stays unnamed in
    # its segment, which goes once nothing names it: the empty spool below).
    refused_ids = re.findall(r"([0-9A-F]{17}): TA_COMMIT deferred: queue full", relay.log_text())
    stored = [os.path.basename(f) for f in content_state(relay)[0]]
    stored += list(segment_records(os.path.join(relay.spool, "cdb")))
    assert len(set(stored) - set(refused_ids)) == 5, stored
    assert not set(refused_ids) & set(os.path.basename(f) for f in content_state(relay)[0])
    assert relay.stats()["queue_size"] == 5

    release(sink)
    wait_until(lambda: relay.stats()["queue_size"] == 0, 30, "the active queue to drain")
    # Room again; and an empty queue takes one transaction even beyond the limit.
    many = ["r%d@example.net" % i for i in range(7)]
    assert send_one(relay, "big@client.test", many, body) == (250, "")
    accepted.append("big@client.test")
    wait_until(lambda: sink.count() >= len(accepted), 30, "every accepted message at the sink")
    wait_until(lambda: not relay.spool_files("cdb"), 30, "an empty spool")
    assert_delivered_once(sink, accepted, refused)
    big = [m for m in sink.messages() if m["from"] == "big@client.test"]
    assert sorted(r for m in big for r in m["rcpts"]) == sorted(many)


def fill(path):
    """Writes path/filler until the file system is full."""
    with open(os.path.join(path, "filler"), "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError as e:
            assert e.errno == errno.ENOSPC, e


def test_envelope_log_full_answers_452(tmpfs, mount_tmpfs, make_sink, make_disk_relay):
    """ENOSPC in the IBDB (its own small file system here, so that the content still fits)."""
    ibdb = mount_tmpfs(os.path.join(tmpfs, "spool", "ibdb"), 64 << 10)
    fill(ibdb)
    sink = make_sink()
    relay = make_disk_relay(sink.port, "min_free_space = 0")
    before = pids(relay)
    body = b"Subject: ibdb\r\n\r\nenvelope log full\r\n"
    code, text = send_one(relay, "lost@client.test", ["x@example.net"], body)
    assert (code, text.split(" ")[0]) == (452, "4.3.1"), (code, text)
    wait_until(lambda: "No space left on device" in relay.log_text()
               and "envelope log write failed" in relay.log_text(), 10, "the ENOSPC lines")
    # Nothing stays behind that could be delivered or swept up later.
    assert content_state(relay) == ([], [])
    assert relay.stats()["queue_size"] == 0

    os.unlink(os.path.join(ibdb, "filler"))
    assert send_one(relay, "ok@client.test", ["x@example.net"], body) == (250, "")
    wait_until(lambda: sink.count() >= 1, 30, "the message sent after the space came back")
    wait_until(lambda: not relay.spool_files("cdb"), 30, "an empty spool")
    time.sleep(1)
    assert_delivered_once(sink, ["ok@client.test"], ["lost@client.test"])
    assert pids(relay) == before



def send_until_452(relay, tag, sizes=(300 << 10,)):
    """Messages of the sizes in turn on one connection until three get 452
    4.3.1; any other answer fails. Returns the senders accepted and refused."""
    accepted, refused = [], []
    with smtplib.SMTP("127.0.0.1", relay.port, timeout=30) as c:
        c.ehlo("client.test")
        while len(refused) < 3:
            n = len(accepted + refused)
            sender = "%s-%d@client.test" % (tag, n)
            code, text = try_send(c, sender, ["x@example.net"], message(sender, sizes[n % len(sizes)]))
            assert code == 250 or (code == 452 and text.startswith("4.3.1")), (code, text)
            (accepted if code == 250 else refused).append(sender)
            assert len(accepted) < FS_SIZE // min(sizes), "intake never stopped"
    return accepted, refused


def test_deferrals_on_a_full_disk_and_a_restart_on_it(tmpfs, make_sink, held_sinks,
                                                      make_disk_relay):
    """With min_free_space = 0 the disk fills completely while the next hop
    holds the mail; then it answers 451, on the full disk: the copies of the
    smaller messages out of their content segments, and DEFEDB's writes,
    fail and are retried, not in a loop, and nothing dies. Stopped and
    started again on the full disk, QMGR gives back its emergency reserve so
    that DEFEDB recovery can write, and once the next hop takes mail
    everything goes, exactly once, with no operator freeing space; then the
    reserve is made again."""
    port = free_port()
    tempfail = make_sink("--port", str(port), "--tempfail-rcpt", ".", sub="tempfail")
    held_sinks(tempfail)
    relay = make_disk_relay(port, "min_free_space = 0")
    reserve = os.path.join(relay.spool, "defedb", "reserve")
    assert os.path.getsize(reserve) == RESERVE
    before = pids(relay)
    accepted, refused = send_until_452(relay, "full", (300 << 10, 100 << 10))
    release(tempfail)
    wait_until(lambda: "copy of its content for DEFEDB: No space left on device"
               in relay.log_text(), 30, "a deferral copy to fail for want of space")
    time.sleep(6)  # DEFEDB batches are retried every 5 s
    errors = relay.log_text().count("defedb: ")
    assert errors < 500, "%d DEFEDB error lines: retried in a loop" % errors
    assert pids(relay) == before, "a process died on the full disk"
    relay.stop()
    assert "killed by signal" not in relay.log_text()
    tempfail.stop()
    back = make_sink("--port", str(port), sub="back")  # takes mail
    fill(tmpfs)
    relay.start()
    wait_until(lambda: "emergency reserve of %d bytes given back" % RESERVE in relay.log_text(),
               10, "the reserve given back")
    assert "its file system is full" not in relay.log_text()
    before = pids(relay)
    wait_until(lambda: back.count() >= len(accepted), 60, "every accepted message")
    wait_until(lambda: not relay.spool_files("cdb"), 30, "an empty spool")
    wait_until(lambda: "in 0 requests" in relay.smx("queue").stdout, 30, "an empty DEFEDB")
    time.sleep(1)
    assert_delivered_once(back, accepted, refused)
    assert not relay.spool_files("quarantine")
    # The delivered mail's space (the filler keeps the rest) holds the reserve again.
    wait_until(lambda: os.path.exists(reserve), 10, "the reserve made again")
    assert os.path.getsize(reserve) == RESERVE
    assert send_one(relay, "after@client.test", ["x@example.net"], message("after", 1000)) == (250, "")
    wait_until(lambda: back.count() > len(accepted), 30, "the message sent after the drain")
    assert pids(relay) == before


def test_free_space_reserve_keeps_delivery_going(tmpfs, make_sink, make_disk_relay):
    """The point of min_free_space: intake stops before the disk is full, so
    DEFEDB can still write and the spool drains once the next hop is back,
    with no operator."""
    port = free_port()  # the next hop is down
    relay = make_disk_relay(port, "min_free_space = %d" % (6 << 20))
    accepted, refused = send_until_452(relay, "reserve")
    wait_until(lambda: re.search(r"reject: (MAIL|END-OF-MESSAGE) from \S+: 452 4\.3\.1 Insufficient "
                                 r"system storage;", relay.log_text()), 10, "SMTPS's reject line")
    back = make_sink("--port", str(port), sub="back")
    wait_until(lambda: back.count() >= len(accepted), 60, "every accepted message")
    wait_until(lambda: not relay.spool_files("cdb"), 30, "an empty spool")
    assert "No space left on device" not in relay.log_text()
    time.sleep(1)
    assert_delivered_once(back, accepted, refused)
    assert send_one(relay, "after@client.test", ["x@example.net"], message("after", 1000)) == (250, "")
