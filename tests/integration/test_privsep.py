"""A user per process (issue 9): started as root, SMTPS, QMGR and SMTPC run as
smxs, smxq and smxc; each touches only its part of the spool; QMGR checks who
connects; the MCP follows no link planted in the run directory.

Root only, except the pid-file test. The relay lives in a 0755 directory
under /tmp, not in pytest's 0700 tmp_path, so that the children's accounts
can reach their config and spool; the accounts are made by the install step
(scripts/lib/setup.sh), which the fixture runs as CI would."""
import os
import pwd
import re
import shutil
import socket
import stat
import struct
import subprocess
import sys

import pytest

from conftest import PROTOCOL_VERSION, REPO, SMX, Relay, send, wait_until

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: it switches users")


@pytest.fixture
def make_separate(open_dir, accounts, make_relay):  # open_dir goes after the relay stops
    return lambda sink_port, extra="": make_relay(sink_port, extra, tmp=open_dir,
                                                  separate_users=True)


def as_user(user, group, *cmd, groups=None):
    """cmd run with another uid, gid and supplementary groups, as a child gets them."""
    g = ["--groups", ",".join(groups)] if groups else ["--clear-groups"]
    return subprocess.run(["setpriv", "--reuid", user, "--regid", group, *g, "--", *cmd],
                          capture_output=True, text=True, timeout=30)


def uid_of(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"^Uid:\s+(\d+)", f.read(), re.M).group(1))


def dead_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again: connections are refused


@root_only
def test_each_child_runs_as_its_own_user_and_mail_flows(sink, make_separate, accounts):
    relay = make_separate(sink.port)
    for child, user in (("smx-smtps", "smxs"), ("smx-qmgr", "smxq"), ("smx-smtpc", "smxc")):
        pid = wait_until(lambda: relay.child_pids(child), 10, child)[0]
        assert uid_of(pid) == accounts[user], child
    send(relay.port, "a@client.test", ["x@example.net"], b"Subject: a\r\n\r\nhello\r\n")
    wait_until(lambda: sink.count() == 1, 20, "the message at the sink")
    # Nothing in the spool is for other users: no file has a bit for others,
    # and only the content directories let others (SMTPC) pass, not list;
    # the spool lets others pass to the maildrop (smx-postdrop's group).
    for d, dirs, files in os.walk(relay.spool):
        for name in files:
            assert os.lstat(os.path.join(d, name)).st_mode & 0o007 == 0, name
        for name in dirs:
            assert os.lstat(os.path.join(d, name)).st_mode & 0o006 == 0, name
    assert stat.S_IMODE(os.stat(relay.spool).st_mode) == 0o751
    assert stat.S_IMODE(os.stat(relay.spool + "/maildrop").st_mode) == 0o1730


@root_only
def test_each_child_touches_only_its_part_of_the_spool(make_separate):
    relay = make_separate(dead_port())  # the mail stays queued
    send(relay.port, "q@client.test", ["x@example.net"], b"Subject: q\r\n\r\nstays\r\n")
    # Its content: a record at the end of a content segment (binary header
    # first), SMTPS's file in the group's directory all the same.
    content = wait_until(lambda: relay.spool_files("cdb"), 20, "a content segment")[0]
    ibdb = wait_until(lambda: relay.spool_files("ibdb"), 20, "an IBDB file")[0]
    smtps = ("smxs", "smx", ["smx", "smxs"])
    smtpc = ("smxc", "smx", ["smx", "smxc"])
    r = as_user(smtps[0], smtps[1], "cat", ibdb, groups=smtps[2])
    assert r.returncode != 0 and "Permission denied" in r.stderr, r
    r = as_user(smtps[0], smtps[1], "ls", relay.spool + "/defedb", groups=smtps[2])
    assert r.returncode != 0 and "Permission denied" in r.stderr, r
    r = as_user(smtpc[0], smtpc[1], "tail", "-c", "16", content, groups=smtpc[2])
    assert r.returncode == 0 and "stays" in r.stdout, r
    for cmd in (["rm", "-f", content], ["sh", "-c", "echo x >> " + content],
                ["touch", os.path.dirname(content) + "/planted"]):
        r = as_user(smtpc[0], smtpc[1], *cmd, groups=smtpc[2])
        assert r.returncode != 0, (cmd, r)
    assert os.path.exists(content)


# Claims a role on qmgr.sock as the calling process; prints HELLO_ACK's status.
# Run as another account, which may not reach this file: a script of its own.
HELLO_PROBE = r"""
import os, socket, struct, sys
def field(tag, value):
    return struct.pack(">HI", tag, len(value)) + value
body = (field(1, sys.argv[2].encode()) + field(2, struct.pack(">I", int(sys.argv[3]))) +
        field(3, struct.pack(">I", os.getpid())))
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
s.connect(sys.argv[1])
s.sendall(struct.pack(">IHHQ", len(body), 1, 0, 0) + body)
length, rtype = struct.unpack(">IH", s.recv(16, socket.MSG_WAITALL)[:6])
data = s.recv(length, socket.MSG_WAITALL)
assert rtype == 2, rtype
while data:
    tag, n = struct.unpack(">HI", data[:6])
    if tag == 4:
        print(struct.unpack(">I", data[6:6 + n])[0])
    data = data[6 + n:]
"""


@root_only
def test_qmgr_takes_a_role_only_from_its_account(sink, make_separate):
    relay = make_separate(sink.port)
    sock = relay.run_dir + "/qmgr.sock"
    for role, want in (("smtps", "1"), ("smtpc", "0")):
        r = as_user("smxc", "smx", sys.executable, "-c", HELLO_PROBE, sock, role,
                    str(PROTOCOL_VERSION), groups=["smx", "smxc"])
        assert r.returncode == 0 and r.stdout.strip() == want, (role, r)
    wait_until(lambda: "role smtps not allowed for uid %d" % pwd.getpwnam("smxc").pw_uid
               in relay.log_text(), 5, "QMGR to log the refusal")


@root_only
def test_changing_the_queue_needs_root_or_the_admin_group(make_separate):
    # nobody may read (stats_group) but not change; adm may change.
    relay = make_separate(dead_port(), '[server]\nstats_group = "nogroup"\nadmin_group = "adm"\n')
    smx = os.path.join(relay.tmp, "smx")  # the build tree may be out of nobody's reach
    shutil.copy(SMX, smx)
    send(relay.port, "d@client.test", ["x@example.net"], b"Subject: d\r\n\r\ndelete me\r\n")
    out = wait_until(lambda: (lambda o: o if "d@client.test" in o else None)(
        relay.smx("queue").stdout), 20, "the message in smx queue")
    qid = re.search(r"\b([0-9A-F]{17})\b", out).group(1)
    r = as_user("nobody", "nogroup", smx, "queue", "-c", relay.config)
    assert r.returncode == 0 and qid in r.stdout, r
    r = as_user("nobody", "nogroup", smx, "delete", qid, "-c", relay.config)
    assert r.returncode == 1 and "permission denied" in r.stderr, r
    r = as_user("nobody", "smx", smx, "stats", "-c", relay.config)
    assert r.returncode == 1 and "permission denied" in r.stderr, r
    assert qid in relay.smx("queue").stdout
    r = as_user("nobody", "nogroup", smx, "delete", qid, "-c", relay.config, groups=["adm"])
    assert r.returncode == 0, r
    wait_until(lambda: qid not in relay.smx("queue").stdout, 20, "the id to leave the queue")


def test_a_symlinked_pid_file_is_refused(sink, tmp_path):
    relay = Relay(str(tmp_path), sink.port)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    os.makedirs(relay.run_dir)
    os.symlink(victim, os.path.join(relay.run_dir, "smx.pid"))
    r = subprocess.run([SMX, "run", "-c", relay.config], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 1
    assert "smx.pid is a symbolic link; refusing to follow it" in r.stderr, r.stderr
    assert victim.read_text() == "precious\n"
