"""Issue 25: min_free_space is a reserve, and QMGR restarts on a full disk.

A 24 MiB tmpfs spool (mounted by the test: root only, skipped otherwise), a
next hop that answers 451 to every recipient (so every message is deferred,
and one kept in a content segment is copied to a file of its own), and
several senders that go on while intake refuses them. Free space, sampled
every few milliseconds, must never fall below half of min_free_space. Then the rest
of the disk is filled and QMGR killed with SIGKILL: it must give back its
emergency reserve, recover, and answer again within 15 s; and once the next
hop takes mail, every message that got a 250 arrives exactly once.
"""
import os
import re
import signal
import smtplib
import threading
import time

from conftest import free_port, wait_until
from test_disk import fill, free_bytes, mount_tmpfs  # noqa: F401 (a fixture)

FS_SIZE = 24 << 20
MIN_FREE = 4 << 20
EMERGENCY = 4 << 20  # qmgr/disk_space.hpp reserve_file_size
# Below 256 KiB a message goes to a content segment (and counts twice).
SIZES = (30 << 10, 120 << 10, 230 << 10, 400 << 10, 700 << 10)
SENDERS = 4
SEND_FOR = 10  # seconds
BACK_WITHIN = 15


def message(msgid, size):
    line = b"y" * 76 + b"\r\n"
    head = b"Message-ID: <%s>\r\nSubject: reserve\r\n\r\n" % msgid.encode()
    return head + line * (size // len(line))


def message_id(data):
    m = re.search(rb"(?im)^Message-ID: <([^>]+)>", data)
    return m.group(1).decode() if m else None


def send(port, msgid, body, declare_size):
    """(code, text) of the reply that decided the message. Without SIZE the
    reserve is checked at MAIL for nothing and at the end of the data."""
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as c:
        c.ehlo("client.test")
        code, text = c.mail("s-%s" % msgid, ["SIZE=%d" % len(body)] if declare_size else [])
        if code == 250:
            code, text = c.rcpt("x@example.net")
        if code == 250:
            code, text = c.data(body)
        return code, text.decode(errors="replace")


class FreeSpaceMonitor(threading.Thread):
    """The least free space seen, statvfs every 2 ms."""

    def __init__(self, path):
        super().__init__(daemon=True)
        self.path, self.least, self.samples = path, free_bytes(path), 0
        self.done = threading.Event()

    def run(self):
        while not self.done.is_set():
            self.least = min(self.least, free_bytes(self.path))
            self.samples += 1
            time.sleep(0.002)

    def stop(self):
        self.done.set()
        self.join(10)


def answers(port):
    """A 220 greeting, and 452 or 250 to MAIL."""
    try:
        with smtplib.SMTP("127.0.0.1", port, timeout=5) as c:
            c.ehlo("client.test")
            return c.mail("probe@client.test")[0] in (250, 452)
    except (OSError, smtplib.SMTPException):
        return False


def test_reserve_holds_and_qmgr_recovers_on_a_full_disk(tmp_path, mount_tmpfs, make_sink,
                                                        make_relay):
    fs = mount_tmpfs(str(tmp_path / "fs"), FS_SIZE)
    spool = os.path.join(fs, "spool")
    port = free_port()
    tempfail = make_sink("--port", str(port), "--tempfail-rcpt", ".", sub="tempfail")
    relay = make_relay(port, '[queue]\nspool_dir = "%s"\nmin_free_space = %d' % (spool, MIN_FREE),
                       start=False)
    relay.start()
    reserve = os.path.join(spool, "defedb", "reserve")
    assert os.path.getsize(reserve) == EMERGENCY

    monitor = FreeSpaceMonitor(fs)
    monitor.start()
    accepted, refused, bad, lock = {}, [], [], threading.Lock()

    # Long enough for segments to go (test_segment_age = 6) and deferred
    # mail to be retried while intake is refused now and then.
    end = time.monotonic() + SEND_FOR

    def sender(k):
        i = 0
        while time.monotonic() < end:
            msgid = "m%d.%d@client.test" % (k, i)
            code, text = send(relay.port, msgid, message(msgid, SIZES[(k + i) % len(SIZES)]),
                              declare_size=i % 2 == 0)
            with lock:
                if code == 250:
                    accepted[msgid] = re.search(r"queued as ([0-9A-F]{17})", text).group(1)
                elif (code, text.split(" ")[0]) == (452, "4.3.1"):
                    refused.append(msgid)
                else:
                    bad.append((msgid, code, text))
            i += 1
            if code != 250:
                time.sleep(0.2)  # as a client would, a little later

    threads = [threading.Thread(target=sender, args=(k,)) for k in range(SENDERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(SEND_FOR + 60)
    assert not any(t.is_alive() for t in threads), "a sender hung"
    assert not bad, bad
    assert len(accepted) > 10 and refused, (len(accepted), len(refused))
    # Refused at the end of the data too (no SIZE), where nothing stays behind.
    log = relay.log_text()
    assert "reject: MAIL from" in log and "reject: END-OF-MESSAGE from" in log
    # Every accepted message deferred, its deferral copy made.
    wait_until(lambda: relay.stats()["queue_deferred"] == len(accepted), 30,
               "every accepted message in DEFEDB")
    monitor.stop()
    assert monitor.least >= MIN_FREE // 2, \
        "free space fell to %d bytes (min_free_space %d)" % (monitor.least, MIN_FREE)
    assert "No space left on device" not in relay.log_text()

    # Full: the rest of the disk taken, QMGR killed.
    fill(fs)
    old = {name: relay.child_pids(name) for name in ("smx-qmgr", "smx-smtps")}
    t0 = time.monotonic()
    os.kill(old["smx-qmgr"][0], signal.SIGKILL)

    def back():
        new = {name: relay.child_pids(name) for name in old}
        return all(new[n] and not set(new[n]) & set(old[n]) for n in new) and answers(relay.port)
    wait_until(back, BACK_WITHIN, "the relay back and answering")
    assert time.monotonic() - t0 < BACK_WITHIN
    log = relay.log_text()
    assert "emergency reserve of %d bytes given back" % EMERGENCY in log
    assert "its file system is full" not in log

    # The next hop takes mail: each 250 arrives once, nothing refused does.
    tempfail.stop()
    sink = make_sink("--port", str(port), sub="sink")
    wait_until(lambda: sink.count() >= len(accepted), 60, "every accepted message")
    wait_until(lambda: not relay.spool_files("cdb") and relay.stats()["queue_deferred"] == 0, 30,
               "an empty queue")
    time.sleep(1)  # a duplicate would show up now
    got = [message_id(m["data"]) for m in sink.messages()]
    assert sorted(got) == sorted(accepted), "lost: %s, extra: %s" % (
        set(accepted) - set(got), [g for g in got if got.count(g) > 1 or g not in accepted])
    assert not relay.spool_files("quarantine")
    # Their space (the filler keeps the rest) holds the emergency reserve again.
    wait_until(lambda: os.path.exists(reserve), 10, "the emergency reserve made again")
    os.unlink(os.path.join(fs, "filler"))
