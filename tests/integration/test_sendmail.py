"""Local submission (issue 26, item 3): the sendmail command, smx-postdrop
(setgid smxdrop) writing into <spool>/maildrop, smx-pickup taking it from
there, as postfix's postdrop and pickup. Real processes, real accounts:
the relay runs with a user per process and local users are `nobody` and
`daemon` (setpriv), so root only. The programs are copied into a 0755
directory, smx-postdrop made root:smxdrop 2755 as the package makes it."""
import email
import email.policy
import grp
import json
import os
import pwd
import random
import re
import shutil
import signal
import stat
import struct
import subprocess
import time

import pytest

from conftest import BUILD, wait_until

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: it switches users")

NOBODY = pwd.getpwnam("nobody").pw_uid


def as_user(user, group, *cmd, groups=None, input=b"", env=None):
    g = ["--groups", ",".join(groups)] if groups else ["--clear-groups"]
    return subprocess.run(["setpriv", "--reuid", user, "--regid", group, *g, "--", *cmd],
                          input=input, capture_output=True, timeout=60, env=env)


class Local:
    """The relay's local side: its programs as installed, its maildrop."""

    def __init__(self, relay, bindir):
        self.relay = relay
        self.bin = bindir
        self.maildrop = os.path.join(relay.spool, "maildrop")
        self.quarantine = os.path.join(relay.spool, "maildrop-quarantine")

    def sendmail(self, *args, input=b"", user="nobody", group="nogroup", program="sendmail",
                 env=None):
        return as_user(user, group, os.path.join(self.bin, program), "-C", self.relay.config,
                       *args, input=input, env=env)

    def files(self, d=None):
        d = d or self.maildrop
        return sorted(os.listdir(d)) if os.path.isdir(d) else []

    def pickup_pid(self):
        return wait_until(lambda: self.relay.child_pids("smx-pickup"), 15, "smx-pickup")[0]


@pytest.fixture
def local(open_dir, accounts, make_relay, sink):
    bindir = os.path.join(open_dir, "bin")
    os.mkdir(bindir, 0o755)
    for folder, name in (("sendmail", "sendmail"), ("postdrop", "smx-postdrop"), ("mcp", "smx")):
        shutil.copy2(os.path.join(BUILD, folder, name), os.path.join(bindir, name))
    postdrop = os.path.join(bindir, "smx-postdrop")
    os.chown(postdrop, 0, grp_id("smxdrop"))
    os.chmod(postdrop, 0o2755)
    for alias in ("mailq", "newaliases"):
        os.symlink("sendmail", os.path.join(bindir, alias))

    def make(extra="", start=True, port=None):
        relay = make_relay(port or sink.port, extra, start=start, tmp=open_dir,
                           separate_users=True)
        return Local(relay, bindir)
    return make


def grp_id(name):
    return grp.getgrnam(name).gr_gid


def parse(data):
    return email.message_from_bytes(data, policy=email.policy.compat32)


def sink_by_subject(sink):
    out = {}
    for m in sink.messages():
        out.setdefault(parse(m["data"])["Subject"], []).append(m)
    return out


def test_sendmail_t_from_a_user_reaches_the_sink_with_the_headers_local_mail_gets(sink, local):
    lm = local()
    r = lm.sendmail("-t", "-i", input=b"To: Bob <bob@example.net>, carol@example.net\n"
                                      b"Cc: dave@example.org\nBcc: eve@example.com\n"
                                      b"Subject: from cron\n\nline one\n.\nline three\n")
    assert r.returncode == 0, r.stderr
    assert r.stderr == b""
    wait_until(lambda: sink.count() == 1, 30, "the message at the sink")
    m = sink.messages()[0]
    assert m["from"] == "nobody@smx.test"
    assert sorted(m["rcpts"]) == ["bob@example.net", "carol@example.net", "dave@example.org",
                                  "eve@example.com"]
    data = m["data"]
    # Our Received: first, naming the user; then the message with what
    # cleanup adds to local mail, and no Bcc:.
    first = data.split(b"\r\n\t")[0]
    assert first == b"Received: by smx.test (smx, from userid %d (nobody))" % NOBODY, data[:200]
    msg = parse(data)
    assert msg["From"] == "nobody <nobody@smx.test>" or msg["From"].endswith("<nobody@smx.test>")
    assert re.match(r"\w{3}, \d\d? \w{3} \d{4} \d\d:\d\d:\d\d \+0000$", msg["Date"]), msg["Date"]
    assert re.match(r"<\d{14}\.[0-9a-f]{32}@smx\.test>$", msg["Message-ID"]), msg["Message-ID"]
    assert "Bcc" not in msg and b"eve@example.com" not in data
    assert msg.get_payload() == "line one\r\n.\r\nline three\r\n"
    assert b"\r\n" in data and b"\n" not in data.replace(b"\r\n", b"")
    # pickup logs the user as postfix's does; QMGR the rest.
    qid = re.search(rb"\tid ([0-9A-F]{17});", data).group(1).decode()
    lm.relay.log_matching(r"%s: uid=%d from=<nobody@smx.test>" % (qid, NOBODY),
                          r"%s: from=<nobody@smx.test>, size=\d+, nrcpt=4 \(queue active\)" % qid)
    assert lm.files() == []


def test_with_smx_stopped_the_message_waits_in_the_maildrop_then_goes_once(sink, local):
    lm = local()
    lm.relay.stop()
    r = lm.sendmail("waiting@example.net", input=b"Subject: while stopped\n\nhello\n")
    assert r.returncode == 0, r.stderr
    [name] = lm.files()
    assert re.fullmatch(r"m[0-9a-f]{32}", name)
    st = os.lstat(os.path.join(lm.maildrop, name))
    # The user's own file, readable by pickup only besides them.
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (NOBODY, grp_id("smxdrop"), 0o404)
    time.sleep(1)
    assert sink.count() == 0
    lm.relay.start()
    wait_until(lambda: sink.count() == 1, 30, "the message at the sink")
    assert sink.messages()[0]["rcpts"] == ["waiting@example.net"]
    assert lm.files() == []
    time.sleep(2)  # and not a second time
    assert sink.count() == 1


def test_f_and_F_set_the_sender_and_the_full_name(sink, local):
    lm = local()
    r = lm.sendmail("-f", "bounces@example.org", "-F", "Cron Daemon", "x@example.net",
                    input=b"Subject: f\n\nbody\n")
    assert r.returncode == 0, r.stderr
    r = lm.sendmail("-f", "<>", "-FO'Brien, Pat", "y@example.net", input=b"Subject: null\n\nb\n")
    assert r.returncode == 0, r.stderr
    wait_until(lambda: sink.count() == 2, 30, "two messages")
    by = sink_by_subject(sink)
    f = by["f"][0]
    assert f["from"] == "bounces@example.org"
    assert parse(f["data"])["From"] == "Cron Daemon <bounces@example.org>"
    null = by["null"][0]
    assert null["from"] == ""
    assert parse(null["data"])["From"] == "\"O'Brien, Pat\" <nobody@smx.test>"


def test_a_lone_dot_ends_the_message_unless_i(sink, local):
    lm = local()
    body = b"Subject: %s\n\nbefore\n.\nafter\n"
    assert lm.sendmail("dot@example.net", input=body % b"dot").returncode == 0
    assert lm.sendmail("-oi", "dot@example.net", input=body % b"oi").returncode == 0
    wait_until(lambda: sink.count() == 2, 30, "two messages")
    by = sink_by_subject(sink)
    assert parse(by["dot"][0]["data"]).get_payload() == "before\r\n"
    assert parse(by["oi"][0]["data"]).get_payload() == "before\r\n.\r\nafter\r\n"


def test_bs_speaks_smtp_on_standard_input_and_output(sink, local):
    lm = local()
    session = (b"EHLO client\r\nMAIL FROM:<nobody@smx.test>\r\nRCPT TO:<bs@example.net>\r\n"
               b"RCPT TO:<bs@EXAMPLE.NET>\r\nDATA\r\nSubject: bs\r\n\r\n..stuffed\r\n.\r\n"
               b"RCPT TO:<x@example.net>\r\nQUIT\r\n")
    r = lm.sendmail("-bs", input=session)
    assert r.returncode == 0, r.stderr
    replies = r.stdout.decode().split("\r\n")
    assert replies[0] == "220 smx.test ESMTP smx (local submission)"
    assert "250-SIZE 10485760" in replies and "250 ENHANCEDSTATUSCODES" in replies
    codes = [l[:3] for l in replies if l and l[3:4] == " "]
    assert codes == ["220", "250", "250", "250", "250", "354", "250", "503", "221"], replies
    assert re.search(r"^250 2\.0\.0 Ok: queued as m[0-9a-f]{32}\r$", r.stdout.decode(), re.M)
    wait_until(lambda: sink.count() == 1, 30, "the message at the sink")
    m = sink.messages()[0]
    assert m["rcpts"] == ["bs@example.net"]  # the same recipient once
    assert parse(m["data"]).get_payload() == ".stuffed\r\n"


def test_a_message_over_max_message_size_is_refused_and_leaves_nothing(sink, local):
    lm = local("[server]\nmax_message_size = 2000")
    big = b"Subject: big\n\n" + b"x" * 76 + b"\n"
    r = lm.sendmail("big@example.net", input=big * 30)
    assert r.returncode == 65, r  # EX_DATAERR
    assert b"exceeds server.max_message_size (2000): message file too big" in r.stderr
    assert lm.files() == []
    # The same limit in -bs, and smx-postdrop's own when it is called directly.
    r = lm.sendmail("-bs", input=b"HELO x\r\nMAIL FROM:<a@b.c> SIZE=5000\r\nQUIT\r\n")
    assert b"552 5.3.4" in r.stdout
    ok = lm.sendmail("small@example.net", input=b"Subject: small\n\nfits\n")
    assert ok.returncode == 0, ok.stderr
    wait_until(lambda: sink.count() == 1, 30, "the small one")


def test_what_postdrop_refuses_from_a_user_and_the_exit_statuses(local):
    lm = local(start=False)
    lm.relay.start()
    lm.relay.stop()
    # Straight to smx-postdrop: a uid in the input, garbage, a short input.
    e = encode_envelope(sender="a@b.c", rcpts=["d@e.f"], content=b"x\r\n", uid=0)
    for data, why in ((e, b"a uid or time in a submission"), (b"From alice Sun Nov 22 19:00:22 2026\n", b"not a maildrop file"),
                      (b"hi\n", b"the input ended before the envelope"),
                      (encode_envelope(sender="a@b.c", rcpts=["d@e.f"], content=b"x\r\n")[:-2],
                       b"the input ended within the message"),
                      (encode_envelope(sender="a@b.c", rcpts=["d@e.f"], content=b"x\n\r\n"),
                       b"a bare CR or LF")):
        r = as_user("nobody", "nogroup", os.path.join(lm.bin, "smx-postdrop"), "-c",
                    lm.relay.config, input=data)
        assert r.returncode == 65 and why in r.stderr, (why, r)
    assert lm.files() == []
    # sendmail's own: no recipients, a bad address, a bad option, -bd.
    assert lm.sendmail(input=b"x\n").returncode == 64
    r = lm.sendmail("bad address@x", input=b"x\n")
    assert r.returncode == 65 and b"invalid recipient address <bad address@x>" in r.stderr
    r = lm.sendmail("-f", input=b"")
    assert r.returncode == 64 and b"option -f needs an argument" in r.stderr
    assert lm.sendmail("-bd").returncode == 64
    r = lm.sendmail("-Z", "ok@example.net", input=b"Subject: z\n\nz\n")
    assert r.returncode == 0 and r.stderr == b"sendmail: warning: -Z option ignored\n", r
    # newaliases: nothing to rebuild, said so, status 0.
    r = lm.sendmail(program="newaliases")
    assert r.returncode == 0 and b"no alias table" in r.stderr
    assert lm.sendmail("-bi").returncode == 0
    # A maildrop the user cannot write: smx-postdrop without its group.
    plain = os.path.join(lm.bin, "postdrop-plain")
    shutil.copy(os.path.join(lm.bin, "smx-postdrop"), plain)
    r = as_user("nobody", "nogroup", plain, "-c", lm.relay.config,
                input=encode_envelope(sender="", rcpts=["d@e.f"], content=b"x\r\n"))
    assert r.returncode == 77, r  # EX_NOPERM
    assert b"cannot create a file in the maildrop: Permission denied" in r.stderr


def built_with_test_hooks():
    with open(os.path.join(BUILD, "meson-info", "intro-buildoptions.json")) as f:
        return any(o["name"] == "test_hooks" and o["value"] for o in json.load(f))


def encode_envelope(sender, rcpts, content, uid=None, arrival=None, size=None):
    """libsm/maildrop_file.hpp's format, written here on its own."""
    def tlv(tag, value):
        return struct.pack(">HI", tag, len(value)) + value
    fields = b""
    if uid is not None:
        fields += tlv(1, struct.pack(">I", uid))
        fields += tlv(2, struct.pack(">Q", arrival if arrival is not None else int(time.time() * 1e6)))
    fields += tlv(3, sender.encode())
    for r in rcpts:
        fields += tlv(4, r.encode())
    fields += tlv(5, struct.pack(">Q", len(content) if size is None else size))
    return b"SMXDROP1" + struct.pack(">I", len(fields)) + fields + content


def test_a_user_cannot_list_read_or_remove_another_users_maildrop_file(local):
    lm = local(start=False)
    lm.relay.start()
    lm.relay.stop()
    assert lm.sendmail("secret@example.net", input=b"Subject: mine\n\nprivate\n").returncode == 0
    [name] = lm.files()
    path = os.path.join(lm.maildrop, name)
    st = os.stat(lm.maildrop)
    assert (stat.S_IMODE(st.st_mode), st.st_gid) == (0o1730, grp_id("smxdrop"))
    # daemon as it is, and with the group smx-postdrop runs with.
    for groups in (None, ["smxdrop"]):
        for cmd in (["ls", lm.maildrop], ["cat", path], ["rm", "-f", path],
                    ["mv", path, lm.maildrop + "/stolen"]):
            r = as_user("daemon", "daemon", *cmd, groups=groups)
            assert r.returncode != 0, (cmd, groups, r)
    # Even its owner only through smx-postdrop: it cannot pass the directory.
    assert as_user("nobody", "nogroup", "cat", path).returncode != 0
    assert lm.files() == [name]


def plant_hostile_files(lm, accounts):
    """As the pickup account (smxs), files smx-pickup must refuse. Returns
    {name: the reason it should log}."""
    smxs = accounts["smxs"]
    good = encode_envelope("p@example.org", ["h@example.net"], b"Subject: planted\r\n\r\nx\r\n",
                           uid=smxs)
    hx = lambda: "m%032x" % random.getrandbits(128)
    names = {k: hx() for k in ("link", "uid0", "fifo", "hard1", "bare", "size", "trunc", "dir")}
    script = """
import os, sys
d, names, good, bad_uid, bare, size, trunc = sys.argv[1], eval(sys.argv[2]), *[bytes.fromhex(x) for x in sys.argv[3:]]
os.symlink("/etc/shadow", os.path.join(d, names["link"]))
for key, data in (("uid0", bad_uid), ("bare", bare), ("size", size), ("trunc", trunc), ("hard1", good)):
    with open(os.path.join(d, names[key]), "wb") as f:
        f.write(data)
os.link(os.path.join(d, names["hard1"]), os.path.join(d, names["hard1"] + "h"))
os.mkfifo(os.path.join(d, names["fifo"]))
os.mkdir(os.path.join(d, names["dir"]))
open(os.path.join(d, "junk"), "w").close()
"""
    args = [lm.maildrop, repr(names), good.hex(),
            encode_envelope("p@example.org", ["h@example.net"], b"x\r\n", uid=0).hex(),
            encode_envelope("p@example.org", ["h@example.net"], b"a\nb\r\n", uid=smxs).hex(),
            encode_envelope("p@example.org", ["h@example.net"], b"x\r\n", uid=smxs, size=1 << 40).hex(),
            encode_envelope("p@example.org", ["h@example.net"], b"x\r\n", uid=smxs)[:20].hex()]
    r = as_user("smxs", "smxs", "python3", "-c", script, *args, groups=["smx", "smxs"])
    assert r.returncode == 0, r
    return {
        names["link"]: "a symbolic link",
        names["uid0"]: "owned by uid %d but says uid 0" % smxs,
        names["fifo"]: "not a regular file",
        names["dir"]: "not a regular file",
        names["hard1"]: "2 hard links",
        names["hard1"] + "h": "not a maildrop file name",
        names["bare"]: "a bare CR or LF in the content",
        names["size"]: "envelope says 1099511627776",
        names["trunc"]: "cut short within its envelope",
        "junk": "not a maildrop file name",
    }


def test_hostile_maildrop_files_are_quarantined_and_pickup_goes_on(sink, local, accounts):
    lm = local(start=False)
    lm.relay.start()
    lm.relay.stop()
    assert lm.sendmail("before@example.net", input=b"Subject: before\n\nok\n").returncode == 0
    hostile = plant_hostile_files(lm, accounts)
    lm.relay.start()
    pid = lm.pickup_pid()
    wait_until(lambda: sink.count() == 1, 30, "the user's message")
    assert lm.sendmail("after@example.net", input=b"Subject: after\n\nok\n").returncode == 0
    wait_until(lambda: sink.count() == 2, 30, "the next message")
    assert sorted(sink_by_subject(sink)) == ["after", "before"]
    wait_until(lambda: sorted(lm.files(lm.quarantine)) == sorted(hostile), 15, "the quarantine")
    assert lm.files() == []
    log = lm.relay.log_text()
    for name, why in hostile.items():
        assert re.search(r"maildrop file %s: [^\n]*%s[^\n]*; moved to %s/%s" %
                         (name, re.escape(why), re.escape(lm.quarantine), name), log), (name, why)
    # Moved as they are: the link still a link, its target untouched.
    assert os.path.islink(os.path.join(lm.quarantine, [n for n, w in hostile.items()
                                                      if w == "a symbolic link"][0]))
    assert lm.pickup_pid() == pid
    assert "panic" not in log


def test_kill_9_of_pickup_mid_way_loses_and_duplicates_nothing(sink, local, monkeypatch):
    """Killed at the two moments that matter (the commit sent, no answer
    read; the answer read, the maildrop file not yet removed), then at
    random while it works through a pile: each message arrives once."""
    if not built_with_test_hooks():
        pytest.skip("%s is built without -Dtest_hooks=true: no fault points" % BUILD)
    lm = local(start=False)
    lm.relay.start()
    lm.relay.stop()
    n = 40
    for i in range(n):
        r = lm.sendmail("pile%d@example.net" % i, input=b"Subject: pile %d\n\nbody\n" % i)
        assert r.returncode == 0, r.stderr
    assert len(lm.files()) == n
    # Where pickup (as smxs) marks that it took the fault once.
    once = os.path.join(lm.relay.tmp, "once")
    os.mkdir(once)
    os.chmod(once, 0o777)
    monkeypatch.setenv("SMX_TEST_PANIC", "pickup:commit_sent")
    monkeypatch.setenv("SMX_TEST_PANIC_ONCE", os.path.join(once, "commit"))
    lm.relay.start()
    wait_until(lambda: "test fault injected at pickup:commit_sent" in lm.relay.log_text(), 20,
               "the fault at commit_sent")
    lm.relay.stop()
    monkeypatch.setenv("SMX_TEST_PANIC", "pickup:acked")
    monkeypatch.setenv("SMX_TEST_PANIC_ONCE", os.path.join(once, "acked"))
    lm.relay.start()
    wait_until(lambda: "test fault injected at pickup:acked" in lm.relay.log_text(), 20,
               "the fault at acked")
    # The next pickup finds that commit done: QMGR had it (or has already
    # delivered it and removed its content).
    wait_until(lambda: re.search(r"already queued|the transaction was committed and is done",
                                 lm.relay.log_text()), 20, "the resumed commit")
    # And kill -9 while it works through the rest.
    for _ in range(2):
        try:
            os.kill(lm.pickup_pid(), signal.SIGKILL)
        except ProcessLookupError:
            pass
        time.sleep(random.uniform(0.05, 0.3))
    wait_until(lambda: sink.count() >= n, 60, "every message")
    time.sleep(3)
    by = sink_by_subject(sink)
    assert sorted(by) == sorted("pile %d" % i for i in range(n))
    assert [s for s, ms in by.items() if len(ms) != 1] == []
    assert lm.files() == [] and lm.files(lm.quarantine) == []


def test_mailq_is_smx_queue_and_q_flushes(local, make_sink):
    dead = make_sink("--tempfail-rcpt", ".")
    lm = local(port=dead.port)
    assert lm.sendmail("stays@example.net", input=b"Subject: stays\n\nq\n").returncode == 0
    wait_until(lambda: "stays@example.net" in lm.relay.smx("queue").stdout, 30, "queued")
    # The message's line (its recipients' next try moves on as it is retried).
    entry = re.compile(r"^[0-9A-F]{17}\S*\s+\d+ .*nobody@smx\.test$", re.M)
    [line] = entry.findall(lm.relay.smx("queue").stdout)
    for program, args in (("mailq", []), ("sendmail", ["-bp"])):
        r = subprocess.run([os.path.join(lm.bin, program), "-C", lm.relay.config, *args],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        assert entry.findall(r.stdout) == [line], r.stdout
        assert r.stdout.startswith("-Queue ID-") and "stays@example.net" in r.stdout
    r = subprocess.run([os.path.join(lm.bin, "sendmail"), "-C", lm.relay.config, "-q"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
