"""Issue 11 item 7: [queue] content_dir and ibdb_dir, the content files and
the envelope log each on a file system of its own.

Each store gets a small tmpfs that the test mounts (root only; skipped
otherwise, as in test_disk.py): the relay, crashes, a full content file
system, a full IBDB file system, the free-space reserve on the IBDB's, the
orphan sweep copying into the spool's quarantine across file systems, and
the accounts of a privilege-separated relay. check-config's refusals need no
root.
"""
import grp
import os
import random
import re
import smtplib
import stat
import subprocess
import threading
import time

import pytest

from conftest import SMX, content_files, send, wait_until
from test_disk import (assert_delivered_once, fill, free_bytes, held_sinks,  # noqa: F401
                       message, mount_tmpfs, release, send_one, try_send)
from test_mcp import kill_under_load, run_load
from test_privsep import dead_port, root_only

FS_SIZE = 16 << 20


def files_under(root):
    found = []
    for d, _, files in os.walk(root):
        found += [os.path.join(d, f) for f in files]
    return found


def hashed_path(content, ta_id):
    """smx::content::file_path: <content>/XX/<id>, XX two hex digits of the id's FNV-1a hash."""
    h = 2166136261
    for c in ta_id.encode():
        h = ((h ^ c) * 16777619) & 0xFFFFFFFF
    return os.path.join(content, "%02X" % (h & 0xFF), ta_id)


@pytest.fixture
def make_split_relay(tmp_path, mount_tmpfs, make_relay):
    """make_relay with content_dir and ibdb_dir each on a tmpfs of its own
    (torn down before the unmounts); the spool stays in tmp."""
    def make(sink_port, extra="", content_size=FS_SIZE, ibdb_size=FS_SIZE, start=True,
             tmp=None, separate_users=False):
        base = tmp or str(tmp_path)
        content = os.path.join(mount_tmpfs(os.path.join(base, "content-fs"), content_size), "cdb")
        ibdb = os.path.join(mount_tmpfs(os.path.join(base, "ibdb-fs"), ibdb_size), "ibdb")
        if "min_free_space" not in extra:
            extra = "min_free_space = 0\n" + extra  # the default is more than a tmpfs here
        r = make_relay(sink_port, '[queue]\ncontent_dir = "%s"\nibdb_dir = "%s"\n%s'
                       % (content, ibdb, extra), start=False, tmp=tmp,
                       separate_users=separate_users)
        r.content, r.ibdb = content, ibdb
        return r.start() if start else r
    return make


def content_state(relay):
    """Content files (not segments) and .tmp files."""
    files = content_files(relay.content)
    return [f for f in files if not f.endswith(".tmp")], [f for f in files if f.endswith(".tmp")]


def test_split_stores_relay_sweep_and_survive_kill_9(make_sink, make_split_relay):
    sink = make_sink()
    relay = make_split_relay(sink.port, "orphan_age = 10", start=False)
    out = relay.smx("check-config").stdout
    assert "cdb:    %s\n" % relay.content in out and "ibdb:   %s\n" % relay.ibdb in out, out
    # A crash leftover on the content file system: the start-up sweep moves it
    # into the spool's quarantine/, across file systems (a copy, not a rename).
    orphan_id = "0000000000000001F"
    orphan = hashed_path(relay.content, orphan_id)
    os.makedirs(os.path.dirname(orphan))
    with open(orphan, "wb") as f:
        f.write(b"Subject: orphan\r\n\r\nleft over\r\n")
    os.utime(orphan, (time.time() - 60, time.time() - 60))
    relay.start()
    quarantined = os.path.join(relay.spool, "quarantine", "cdb-" + orphan_id)
    wait_until(lambda: os.path.exists(quarantined), 10, "the orphan in the spool's quarantine")
    assert not os.path.exists(orphan)
    with open(quarantined, "rb") as f:
        assert f.read() == b"Subject: orphan\r\n\r\nleft over\r\n"
    relay.log_matching(re.escape("then the IBDB file (another file system)"))

    for i in range(5):
        send(relay.port, "s%d@client.test" % i, ["x@example.net"], b"Subject: s\r\n\r\nsplit\r\n")
    wait_until(lambda: sink.count() >= 5, 30, "five messages at the sink")
    # Nothing of the content or the log went into the spool.
    assert not os.path.exists(os.path.join(relay.spool, "cdb"))
    assert not os.path.exists(os.path.join(relay.spool, "ibdb"))
    assert relay.stats()["ibdb_transactions"] >= 5

    # kill -9 under load: everything that got a 250 arrives.
    result = {}
    load = threading.Thread(target=lambda: result.setdefault("acc", run_load(relay, 20, 30, "kx")))
    load.start()
    kill_under_load(relay, load, random.Random(11), 3,
                    [["smx-qmgr"], ["smx-smtps"], ["smx-qmgr", "smx-smtps", "smx-smtpc"]], (0.3, 1.0))
    load.join(300)
    accepted = set(result["acc"])
    assert len(accepted) > 100
    wait_until(lambda: {m["from"] for m in sink.messages()} >= accepted, 120,
               "every message that got a 250")
    wait_until(lambda: relay.stats()["queue_size"] == 0, 60, "an empty active queue")
    # Orphans of killed commits are swept (10 s) into the spool's quarantine.
    wait_until(lambda: not files_under(relay.content), 60, "no content file left")
    assert not [f for f in files_under(os.path.join(relay.spool, "quarantine")) if f.endswith(".tmp")]
    assert relay.stats()["quarantine_write_failures"] == 0
    relay.stop()
    # No log file is left; the IBDB's own file system has its emergency reserve.
    assert files_under(relay.ibdb) == [os.path.join(relay.ibdb, "reserve")]


def test_content_file_system_full_answers_452_and_stores_nothing_half(make_sink, held_sinks,
                                                                       make_split_relay):
    sink = make_sink()
    held_sinks(sink)
    relay = make_split_relay(sink.port, "min_free_space = 0")
    accepted, refused = [], []
    with smtplib.SMTP("127.0.0.1", relay.port, timeout=30) as c:
        c.ehlo("client.test")
        while len(refused) < 3:
            sender = "full-%d@client.test" % len(accepted + refused)
            code, text = try_send(c, sender, ["x@example.net"], message(sender, 300 << 10))
            assert code == 250 or (code == 452 and text.startswith("4.3.1")), (code, text)
            (accepted if code == 250 else refused).append(sender)
            assert len(accepted) < FS_SIZE // (200 << 10), "the content file system never filled"
    wait_until(lambda: "No space left on device" in relay.log_text(), 10, "the ENOSPC line")
    files, tmps = content_state(relay)
    assert not tmps, tmps
    assert len(files) == len(accepted), (len(files), len(accepted))
    # The log's own file system had room all along.
    assert free_bytes(relay.ibdb) > FS_SIZE // 2
    assert relay.stats()["received"] == len(accepted)

    release(sink)
    wait_until(lambda: sink.count() >= len(accepted), 60, "every accepted message at the sink")
    wait_until(lambda: not files_under(relay.content), 30, "an empty content directory")
    time.sleep(1)
    assert_delivered_once(sink, accepted, refused)


def test_ibdb_file_system_full_answers_452(make_sink, make_split_relay):
    sink = make_sink()
    relay = make_split_relay(sink.port, "min_free_space = 0", ibdb_size=64 << 10, start=False)
    os.makedirs(relay.ibdb)
    fill(os.path.dirname(relay.ibdb))
    relay.start()
    body = b"Subject: ibdb\r\n\r\nenvelope log full\r\n"
    code, text = send_one(relay, "lost@client.test", ["x@example.net"], body)
    assert (code, text.split(" ")[0]) == (452, "4.3.1"), (code, text)
    wait_until(lambda: "envelope log write failed" in relay.log_text(), 10, "the ENOSPC line")
    assert content_state(relay) == ([], [])
    assert relay.stats()["queue_size"] == 0

    os.unlink(os.path.join(os.path.dirname(relay.ibdb), "filler"))
    assert send_one(relay, "ok@client.test", ["x@example.net"], body) == (250, "")
    wait_until(lambda: sink.count() >= 1, 30, "the message sent after the space came back")
    wait_until(lambda: not files_under(relay.content), 30, "an empty content directory")
    time.sleep(1)
    assert_delivered_once(sink, ["ok@client.test"], ["lost@client.test"])


def test_free_space_reserve_counts_the_ibdb_file_system(make_sink, make_split_relay):
    """min_free_space on the IBDB's file system: SMTPS's check at MAIL (the
    content's file system) passes, QMGR pauses intake, the content goes again."""
    threshold = 8 << 20
    port = dead_port()  # what gets in stays queued
    relay = make_split_relay(port, "min_free_space = %d" % threshold, start=False)
    os.makedirs(relay.ibdb)
    ballast = os.path.join(os.path.dirname(relay.ibdb), "ballast")
    with open(ballast, "wb") as f:
        f.write(b"\0" * (FS_SIZE - threshold + (1 << 20)))
    relay.start()
    wait_until(lambda: re.search(r"spool %s: \d+ bytes free, intake paused" % re.escape(relay.ibdb),
                                 relay.log_text()), 10, "QMGR's pause line naming the IBDB")
    body = message("r", 1000)
    code, text = send_one(relay, "refused@client.test", ["x@example.net"], body)
    assert (code, text.split(" ")[0]) == (452, "4.3.1"), (code, text)
    # Log lines reach the file through each process's log buffer (up to 250 ms).
    wait_until(lambda: "TA_COMMIT deferred: spool low on free space" in relay.log_text(), 10,
               "the deferred TA_COMMIT logged")
    wait_until(lambda: content_state(relay) == ([], []), 10, "the refused content removed")

    os.unlink(ballast)
    wait_until(lambda: "intake resumed" in relay.log_text(), 10, "intake to resume")
    assert send_one(relay, "ok@client.test", ["x@example.net"], body) == (250, "")
    # Queued for the dead next hop: `smx show` reads its headers from content_dir.
    qid = wait_until(lambda: re.search(r"\b([0-9A-F]{17})\b", relay.smx("queue").stdout), 20,
                     "the message in smx queue").group(1)
    out = relay.smx("show", qid).stdout
    assert "Subject: disk r\n" in out, out


@pytest.mark.parametrize("keys, message", [
    ('content_dir = "{d}"\nibdb_dir = "{d}/"',
     'queue.ibdb_dir: "{d}" is the same directory as queue.content_dir ({d})'),
    ('content_dir = "{d}"\nibdb_dir = "{d}/log"',
     'queue.ibdb_dir: "{d}/log" lies inside queue.content_dir ({d})'),
    ('content_dir = "{d}/cdb"\nibdb_dir = "{d}"',
     'queue.ibdb_dir: "{d}" holds queue.content_dir ({d}/cdb)'),
    ('content_dir = "{s}"', 'queue.content_dir: "{s}" is or holds queue.spool_dir ({s})'),
    ('content_dir = "{s}/ibdb"',
     'queue.content_dir: "{s}/ibdb" is the same directory as queue.ibdb_dir ({s}/ibdb)'),
    ('ibdb_dir = "{s}/defedb"',
     'queue.ibdb_dir: "{s}/defedb" is the same directory as the deferred queue ({s}/defedb)'),
])
def test_check_config_refuses_shared_or_nested_store_dirs(tmp_path, keys, message):
    d, s = str(tmp_path / "d"), str(tmp_path / "spool")
    config = tmp_path / "smx.toml"
    config.write_text('[queue]\nspool_dir = "%s"\n%s\n' % (s, keys.format(d=d, s=s)))
    r = subprocess.run([SMX, "check-config", "-c", str(config)], capture_output=True, text=True)
    assert r.returncode == 2, r
    assert r.stderr.startswith("smx: config error: " + message.format(d=d, s=s)), r.stderr
    # smx run refuses it the same way, before it makes anything.
    r = subprocess.run([SMX, "run", "-c", str(config)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and message.format(d=d, s=s) in r.stderr, r
    assert not os.path.exists(s)


@root_only
def test_privilege_separated_relay_with_split_stores(sink, open_dir, accounts, make_split_relay):
    relay = make_split_relay(sink.port, tmp=open_dir, separate_users=True)
    send(relay.port, "a@client.test", ["x@example.net"], b"Subject: a\r\n\r\nhello\r\n")
    wait_until(lambda: sink.count() == 1, 20, "the message at the sink")
    assert sink.messages()[0]["data"].endswith(b"hello\r\n")
    # The table of docs/mcp.md, outside the spool too.
    smtps_group = grp.getgrnam("smxs").gr_gid
    for d in (relay.content, os.path.join(relay.content, "00")):
        st = os.stat(d)
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (
            accounts["smxq"], smtps_group, 0o1771), d
    st = os.stat(relay.ibdb)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (accounts["smxq"], 0o700)
    # The mount points above them are the administrator's: left as they were.
    assert os.stat(os.path.dirname(relay.ibdb)).st_uid == 0
