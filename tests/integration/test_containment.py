"""A compromised SMTPS can spoil only the mail it received itself (issue 25).

Started as root with privilege separation (smxs, smxq, smxc). The tests act as
smxs (setpriv), as whoever took over smx-smtps could: they swap content files
for links to files only smxc or smxq may read, FIFOs, hard links, directories
and sockets; grow or cut them; lie about a segment record's size and restart
QMGR on it; send TA_COMMITs of their own on qmgr.sock naming another
transaction's content, an old segment or a FIFO; and plant fake deferral
copies. In every case no other account's data leaves the machine, no process
crashes, blocks or restarts, other mail keeps flowing, and the spoiled
transaction is quarantined (docs/design.md, "Trust")."""
import os
import pwd
import re
import secrets
import signal
import smtplib
import socket
import struct
import subprocess
import sys
import time

import pytest

from conftest import PROTOCOL_VERSION, crc32c, wait_until

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: it switches users")

BIG = 300 * 1024  # over SMTPS's 256 KiB in memory: a content file of smxs's own

# File operations and a peer on qmgr.sock, run as smxs. A script of its own
# (-c): the build tree may be out of smxs's reach.
SMXS_TOOL = r"""
import os, socket, struct, sys
op, path = sys.argv[1], sys.argv[2]
def clear():
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
if op == "symlink":
    clear(); os.symlink(sys.argv[3], path)
elif op == "fifo":
    clear(); os.mkfifo(path, 0o666)  # anyone may open it: only O_NONBLOCK keeps a reader going
elif op == "dir":
    clear(); os.mkdir(path)
elif op == "socket":
    clear(); socket.socket(socket.AF_UNIX).bind(path)
elif op == "hardlink":
    clear()
    try:
        os.link(sys.argv[3], path)
        print("linked")
    except PermissionError:
        # protected_hardlinks: a link to another's file is refused; a second
        # name of a file of our own instead.
        own = path + ".own"
        with open(own, "wb") as f:
            f.write(b"x" * int(sys.argv[4]))
        os.link(own, path)
        print("own")
elif op == "truncate":
    os.truncate(path, int(sys.argv[3]))
elif op == "pwrite":
    fd = os.open(path, os.O_WRONLY)
    os.pwrite(fd, bytes.fromhex(sys.argv[4]), int(sys.argv[3]))
    os.close(fd)
elif op == "create":
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)
    os.write(fd, bytes.fromhex(sys.argv[3]))
    os.close(fd)
elif op == "commit":
    # path: qmgr.sock; argv[3]: a TA_COMMIT frame (hex). Prints the TA_ACK's
    # status and text.
    def field(tag, value):
        return struct.pack(">HI", tag, len(value)) + value
    hello = field(1, b"smtps") + field(2, struct.pack(">I", int(sys.argv[4]))) + \
        field(3, struct.pack(">I", os.getpid()))
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(20)
    s.connect(path)
    def read():
        length, rtype = struct.unpack(">IH", s.recv(16, socket.MSG_WAITALL)[:6])
        data = s.recv(length, socket.MSG_WAITALL) if length else b""
        fields = {}
        while data:
            tag, n = struct.unpack(">HI", data[:6])
            fields[tag] = data[6:6 + n]
            data = data[6 + n:]
        return rtype, fields
    s.sendall(struct.pack(">IHHQ", len(hello), 1, 0, 0) + hello)
    assert read()[0] == 2
    s.sendall(bytes.fromhex(sys.argv[3]))
    while True:
        rtype, fields = read()
        if rtype == 11:
            break
    print(struct.unpack(">I", fields[4])[0], fields.get(5, b"").decode())
"""


def smxs(op, path, *args):
    r = subprocess.run(["setpriv", "--reuid", "smxs", "--regid", "smx", "--groups", "smx,smxs",
                        "--", sys.executable, "-c", SMXS_TOOL, op, path, *map(str, args)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, (op, path, r.stderr)
    return r.stdout.strip()


def content_path(content, ta_id):
    h = 2166136261
    for c in ta_id:
        h = ((h ^ ord(c)) * 16777619) & 0xFFFFFFFF
    hexd = "0123456789ABCDEF"
    return os.path.join(content, hexd[(h >> 4) & 15] + hexd[h & 15], ta_id)


_counter = [secrets.randbelow(1 << 10)]


def new_id(stream=5, age=0):
    """A transaction id of the kind SMTPS makes (stream 5: none of smx's own)."""
    us = int((time.time() - age) * 1e6)
    _counter[0] = (_counter[0] + 1) & 0x7FF
    return "%08X%05X%04X" % (us // 1000000, us % 1000000, (stream << 11) | _counter[0])


def segment_record(ta_id, data, claimed=None):
    size = len(data) if claimed is None else claimed
    header = b"SMXSEG1\n" + size.to_bytes(8, "little") + crc32c(data).to_bytes(4, "little")
    header += b"\0" * 3 + ta_id.encode()
    assert len(header) == 40
    return header + data


def field(tag, value):
    return struct.pack(">HI", tag, len(value)) + value


def ta_commit(ta_id, content_id, size, rcpts, sender="s@client.test"):
    body = (field(6, ta_id.encode()) + field(7, b"127.0.0.1") + field(8, b"localhost") +
            field(9, b"client.test") + field(10, sender.encode()) + field(11, b""))
    for r in rcpts:
        body += field(12, field(18, r.encode()) + field(11, b""))
    body += (field(13, content_id.encode()) + field(14, struct.pack(">Q", size)) +
             field(15, struct.pack(">Q", int(time.time() * 1e6))))
    return (struct.pack(">IHHQ", len(body), 10, 0, 7) + body).hex()


class Lab:
    """A relay run as smxs/smxq/smxc: the default route to a good sink,
    hold.test to a sink that answers 451 while a gate file exists; and a file
    only smxc and one only smxq may read, each with a marker that must never
    reach a sink."""

    def __init__(self, tmp, make_sink, make_relay, extra=""):
        self.tmp = tmp
        self.gate = os.path.join(tmp, "gate")
        open(self.gate, "w").close()
        self.good = make_sink()
        self.hold = make_sink("--hold-while", self.gate, sub="hold")
        self.relay = make_relay(self.good.port,
                                '[routes]\n"hold.test" = "[127.0.0.1]:%d"\n%s' % (self.hold.port, extra),
                                tmp=tmp, separate_users=True)
        self.content = os.path.join(self.relay.spool, "cdb")
        self.quarantine = os.path.join(self.relay.spool, "quarantine")
        self.markers = {}
        for user in ("smxc", "smxq"):
            marker = "SECRET-OF-%s-%s" % (user, secrets.token_hex(8))
            path = os.path.join(tmp, user + "-secret")
            with open(path, "w") as f:
                f.write(marker + "\n" * 10)
            pw = pwd.getpwnam(user)
            os.chown(path, pw.pw_uid, pw.pw_gid)
            os.chmod(path, 0o600)
            self.markers[user] = (path, marker)
        self.pids = self.child_pids()

    def child_pids(self):
        return {n: self.relay.child_pids(n) for n in ("smx-qmgr", "smx-smtps", "smx-smtpc")}

    def send(self, rcpt, body, mail_opts=()):
        with smtplib.SMTP("127.0.0.1", self.relay.port, timeout=60) as c:
            c.ehlo("client.test")
            code, _ = c.mail("s@client.test", list(mail_opts))
            assert code == 250
            code, _ = c.rcpt(rcpt)
            assert code == 250
            code, msg = c.data(body)
            assert code == 250, msg
        return re.search(rb"queued as ([0-9A-F]{17})", msg).group(1).decode()

    def deferred(self, rcpt):
        return re.search(r"to=<%s>.*status=deferred" % re.escape(rcpt), self.relay.log_text())

    def quarantined(self, ta_id):
        return os.path.exists(os.path.join(self.quarantine, ta_id + ".envelope"))

    def leaked(self):
        """Markers of another account found at a sink."""
        found = []
        for sink in (self.good, self.hold):
            for m in sink.messages():
                for _, marker in self.markers.values():
                    if marker.encode() in m["data"]:
                        found.append(marker)
        return found

    def contained(self):
        """Nothing leaked, no process restarted, and mail still flows."""
        assert self.leaked() == []
        assert self.child_pids() == self.pids, self.relay.log_text()[-3000:]
        before = self.good.count()
        token = secrets.token_hex(6)
        self.send("still@example.net", ("Subject: flows %s\r\n\r\nstill flows\r\n" % token).encode())
        wait_until(lambda: any(token.encode() in m["data"] for m in self.good.messages()), 30,
                   "other mail to keep flowing")
        assert self.good.count() == before + 1
        assert self.child_pids() == self.pids
        self.relay.smx("stats")


@pytest.fixture
def lab(open_dir, accounts, make_sink, make_relay):
    return Lab(open_dir, make_sink, make_relay)


def test_a_swapped_content_file_is_never_read_through(lab):
    """A deferred message's own file (a large one: smxs made it) replaced by
    every kind of thing smxs can put under its name; then the next hop takes
    mail again. Nothing of the targets arrives anywhere, no process blocks or
    restarts, each spoiled transaction is quarantined, an untouched one is
    delivered."""
    smxc_secret = lab.markers["smxc"][0]
    smxq_secret = lab.markers["smxq"][0]
    kinds = {
        "link-smxc": ("symlink", smxc_secret),
        "link-smxq": ("symlink", smxq_secret),
        "fifo": ("fifo",),
        "dir": ("dir",),
        "socket": ("socket",),
        "hardlink": ("hardlink", smxc_secret, BIG),
        "grown": ("truncate", 1 << 40),
        "cut": ("truncate", 100),
    }
    ids = {}
    for kind in list(kinds) + ["untouched"]:
        body = ("Subject: %s\r\n\r\n" % kind).encode() + b"y" * BIG + b"\r\n"
        ids[kind] = lab.send("%s@hold.test" % kind, body)
    for kind in ids:
        wait_until(lambda: lab.deferred("%s@hold.test" % kind), 30, kind + " deferred")
    for kind, (op, *args) in kinds.items():
        path = content_path(lab.content, ids[kind])
        assert os.stat(path).st_uid == pwd.getpwnam("smxs").pw_uid
        smxs(op, path, *args)
    os.unlink(lab.gate)
    wait_until(lambda: any(b"Subject: untouched" in m["data"] for m in lab.hold.messages()), 30,
               "the untouched message to be delivered")
    for kind in kinds:
        wait_until(lambda: lab.quarantined(ids[kind]), 30, kind + " quarantined")
    assert lab.hold.count() == 1, [m["data"][:80] for m in lab.hold.messages()]
    lab.relay.log_matching("a symbolic link", "a FIFO", "a directory", "a socket",
                           "1099511627776 bytes", "100 bytes")
    lab.contained()


def test_a_bounce_never_returns_what_a_swapped_file_points_to(open_dir, accounts, make_sink,
                                                              make_relay):
    """RET=FULL from a relay client, past max_queue_lifetime: QMGR (smxq, which
    may read the envelope log) would build the DSN from the content. A content
    file swapped for a link to a file of smxq's is quarantined when due;
    nothing of the target goes out, in a DSN or otherwise."""
    lab = Lab(open_dir, make_sink, make_relay,
              "[queue]\nretry_min = 300\nretry_max = 300\nmax_queue_lifetime = 2\n")
    body = b"Subject: bounce me\r\n\r\n" + b"z" * BIG + b"\r\n"
    ta = lab.send("gone@hold.test", body, ["RET=FULL"])
    wait_until(lambda: lab.deferred("gone@hold.test"), 30, "deferred")
    smxs("symlink", content_path(lab.content, ta), lab.markers["smxq"][0])
    time.sleep(2.5)  # past max_queue_lifetime: when due it would bounce
    lab.relay.smx("flush")
    wait_until(lambda: lab.quarantined(ta), 30, "the transaction quarantined")
    lab.relay.log_matching(re.escape("a symbolic link"))
    lab.contained()


def test_a_lying_segment_record_is_quarantined_at_recovery_and_qmgr_stays_up(lab):
    """The finding that crash-looped QMGR: a queued message's record size set
    to 2^40, the segment grown sparse, QMGR killed. Recovery quarantines that
    transaction; QMGR starts once and stays up; nothing is read or allocated
    past the limits."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # never accepts, never greets: the delivery stays in flight
    try:
        lab.relay.stop()
        with open(lab.relay.config) as f:
            text = f.read()
        with open(lab.relay.config, "w") as f:
            f.write(text.replace('"hold.test" = "[127.0.0.1]:%d"' % lab.hold.port,
                                 '"hold.test" = "[127.0.0.1]:%d"' % silent.getsockname()[1]))
        lab.relay.start()
        lab.pids = lab.child_pids()
        ta = lab.send("stuck@hold.test", b"Subject: small\r\n\r\nin a segment\r\n")
        seg_dir = os.path.join(lab.content, "segments")
        found = None
        for name in os.listdir(seg_dir):
            with open(os.path.join(seg_dir, name), "rb") as f:
                data = f.read()
            at = data.find(ta.encode())
            if at >= 0:
                found = (os.path.join(seg_dir, name), at - 23)
        assert found, "the record of %s" % ta
        path, off = found
        smxs("pwrite", path, off + 8, (1 << 40).to_bytes(8, "little").hex())
        smxs("truncate", path, (1 << 40) + 4096)
        qmgr = lab.pids["smx-qmgr"][0]
        os.kill(qmgr, signal.SIGKILL)
        wait_until(lambda: lab.quarantined(ta), 30, "the lying record's transaction quarantined")
        new_pids = wait_until(lambda: (lambda p: p if p["smx-qmgr"] and p["smx-qmgr"] != [qmgr]
                                       and p["smx-smtps"] and p["smx-smtpc"] else None)(
            lab.child_pids()), 30, "the children back")
        time.sleep(3)  # a crash loop would show as another QMGR by now
        lab.pids = new_pids
        assert lab.child_pids() == new_pids
        assert "uncaught exception" not in lab.relay.log_text()
        lab.contained()
    finally:
        silent.close()


def test_a_commit_of_its_own_names_only_its_own_content(lab):
    """TA_COMMITs written by hand on qmgr.sock as smxs."""
    sock = os.path.join(lab.relay.run_dir, "qmgr.sock")

    def commit(ta_id, content_id, size, rcpts=("x@example.net",)):
        t0 = time.monotonic()
        out = smxs("commit", sock, ta_commit(ta_id, content_id, size, list(rcpts)), PROTOCOL_VERSION)
        status, _, text = out.partition(" ")
        return int(status), text, time.monotonic() - t0

    # A deferred message of another transaction (its file, or QMGR's copy).
    other = lab.send("other@hold.test", b"Subject: other\r\n\r\n" + b"o" * BIG + b"\r\n")
    wait_until(lambda: lab.deferred("other@hold.test"), 30, "deferred")
    size = os.path.getsize(content_path(lab.content, other))
    status, text, _ = commit(new_id(), other, size)
    assert status == 2 and "content file of another transaction" in text, text
    # An id of the queue manager's own stream (its DSNs).
    status, text, _ = commit(new_id(stream=31), other, size)
    assert status == 2, text

    # Its own segment and records; one naming another transaction's record.
    seg, a, b = new_id(), new_id(), new_id()
    ma, mb = b"Subject: a\r\n\r\nA\r\n", b"Subject: b\r\n\r\nB\r\n"
    data = segment_record(a, ma) + segment_record(b, mb)
    seg_path = os.path.join(lab.content, "segments", seg + ".seg")
    smxs("create", seg_path, data.hex())
    status, text, _ = commit(new_id(), "%s+0" % seg, len(ma))
    assert status == 1 and "the record of another transaction" in text, text
    # A size that no record can have; one the record does not claim.
    status, text, _ = commit(a, "%s+0" % seg, 1 << 40)
    assert status == 2, text
    status, text, _ = commit(a, "%s+0" % seg, len(ma) + 1)
    assert status == 1 and "expected" in text, text
    # Its own record, honestly: taken and delivered (the segment is young).
    status, text, _ = commit(a, "%s+0" % seg, len(ma))
    assert status == 0, text
    wait_until(lambda: any(m["data"] == ma for m in lab.good.messages()), 30, "its own message")
    # A segment made longer ago than segment_age.
    old = new_id(age=3600)
    smxs("create", os.path.join(lab.content, "segments", old + ".seg"),
         segment_record(b, mb).hex())
    status, text, _ = commit(b, "%s+0" % old, len(mb))
    assert status == 1 and "too old" in text, text
    # A FIFO as a segment and as a content file: refused at once, QMGR's loop
    # never waits on it.
    fifo_seg, fifo_ta = new_id(), new_id()
    smxs("fifo", os.path.join(lab.content, "segments", fifo_seg + ".seg"))
    status, text, took = commit(new_id(), "%s+0" % fifo_seg, 10)
    assert status == 1 and "a FIFO" in text and took < 15, (text, took)
    smxs("fifo", content_path(lab.content, fifo_ta))
    status, text, took = commit(fifo_ta, fifo_ta, 10)
    assert status == 1 and "a FIFO" in text and took < 15, (text, took)
    # A link to a file only smxc may read, under its own name.
    link_ta = new_id()
    smxs("symlink", content_path(lab.content, link_ta), lab.markers["smxc"][0])
    status, text, _ = commit(link_ta, link_ta, os.path.getsize(lab.markers["smxc"][0]))
    assert status == 1 and "a symbolic link" in text, text
    lab.contained()


def test_a_planted_deferral_copy_stands_in_for_nothing(lab):
    """Before a message in a segment is first deferred, smxs plants a file of
    the right size under the name of its deferral copy, and a link under the
    copy's temporary name: QMGR writes its own copy (never through the link)
    and the message arrives as it was received."""
    sock = os.path.join(lab.relay.run_dir, "qmgr.sock")
    seg, ta = new_id(), new_id()
    msg = b"Subject: planted\r\n\r\nthe real message\r\n"
    smxs("create", os.path.join(lab.content, "segments", seg + ".seg"),
         segment_record(ta, msg).hex())
    copy = content_path(lab.content, ta)
    smxs("create", copy, (b"X" * len(msg)).hex())
    smxs("symlink", copy + ".tmp", lab.markers["smxq"][0])
    secret_before = open(lab.markers["smxq"][0], "rb").read()
    out = smxs("commit", sock, ta_commit(ta, "%s+0" % seg, len(msg), ["planted@hold.test"]),
               PROTOCOL_VERSION)
    assert out.split(" ")[0] == "0", out
    wait_until(lambda: lab.deferred("planted@hold.test"), 30, "deferred")
    os.unlink(lab.gate)
    wait_until(lambda: lab.hold.count() == 1, 30, "the message delivered")
    assert lab.hold.messages()[0]["data"] == msg
    assert open(lab.markers["smxq"][0], "rb").read() == secret_before
    lab.contained()
