"""Content durability inside QMGR's group commit (queue.content_sync): the
fsync-family calls of the whole relay, counted from outside with strace,
for a burst of messages over concurrent sessions."""
import os
import re
import signal
import subprocess
import threading
import time

import pytest

from conftest import send, wait_until

MSGS = 120
SESSIONS = 12
SYNC_CALLS = ("fsync", "fdatasync", "syncfs", "sync_file_range")


def burst(port, msgs, sessions):
    errors = []

    def one(k):
        try:
            for i in range(k, msgs, sessions):
                send(port, "s@example.org", ["r%d@example.net" % i],
                     b"Subject: %d\r\n\r\n" % i + b"x" * 1000 + b"\r\n")
        except Exception as e:  # reported below, with the others
            errors.append(e)

    threads = [threading.Thread(target=one, args=(k,)) for k in range(sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors


def strace_burst(relay, sink, out, delivered):
    """The sync calls of SMTPS, QMGR and SMTPC while MSGS more messages go
    through (`delivered`: what the sink then has in all), the IBDB commits
    meanwhile, and whether strace lost track of a thread's system calls."""
    pids = [p for name in ("smx-smtps", "smx-qmgr", "smx-smtpc") for p in relay.child_pids(name)]
    assert len(pids) == 3
    log_path = out + ".log"
    args = ["strace", "-f", "-c", "-e", "trace=" + ",".join(SYNC_CALLS), "-o", out]
    for pid in pids:
        args += ["-p", str(pid)]
    commits = relay.stats()["ibdb_commits"]
    with open(log_path, "w") as err:
        proc = subprocess.Popen(args, stderr=err)
    try:
        wait_until(lambda: open(log_path).read().count("attached") >= len(pids), 10,
                   "strace to attach")
        burst(relay.port, MSGS, SESSIONS)
        wait_until(lambda: sink.count() >= delivered, 60, "the sink to have every message")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
    calls = dict.fromkeys(SYNC_CALLS, 0)
    with open(out) as f:
        for line in f:
            m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$", line)
            if m and m.group(2) in calls:
                calls[m.group(2)] += int(m.group(1))
    commits = relay.stats()["ibdb_commits"] - commits
    with open(log_path) as f:
        lost = "ptrace_syscall_info.op" in f.read()
    return calls, commits, lost


def count_syncs(relay, sink, tmp_path, tag):
    """Syncs of SMTPS, QMGR and SMTPC, and IBDB commits, while MSGS messages
    go through.
    Attached to a process in the middle of a system call, strace (6.1, on
    a 6.x kernel) can take every exit for an entry ("pid N: entering,
    ptrace_syscall_info.op == 2") and then counts none of that thread's
    calls: such a count is taken again, with another burst."""
    for attempt in range(3):
        calls, commits, lost = strace_burst(relay, sink, str(tmp_path / ("strace-%s-%d.txt" % (tag, attempt))),
                                   (attempt + 1) * MSGS)
        if not lost:
            return calls, commits
    pytest.fail("strace lost track of system calls in 3 attempts: %s" % calls)


@pytest.fixture
def strace_ok():
    if subprocess.run(["strace", "-V"], capture_output=True).returncode != 0:
        pytest.skip("strace is not installed")


# A 20 ms window: at this test's pace every batch then holds several
# messages, so what is counted is who syncs content, not the commit policy.
WINDOW = "commit_interval_us = 20000\n"


def test_batch_content_sync_shares_the_commit(strace_ok, tmp_path, make_sink, make_relay):
    sink = make_sink()
    relay = make_relay(sink.port, "[queue]\n" + WINDOW)
    calls, commits = count_syncs(relay, sink, tmp_path, "batch")
    total = sum(calls.values())
    # One syncfs per group commit covers the content files and the IBDB
    # (same file system); no per-message fdatasync anywhere.
    assert calls["syncfs"] > 0, calls
    assert calls["fdatasync"] == 0, calls
    assert total <= 0.3 * MSGS, calls
    assert commits <= calls["syncfs"], (commits, calls)
    relay.log_matching(re.escape("each commit syncs the file system of"))


def test_file_content_sync_costs_one_per_message(strace_ok, tmp_path, make_sink, make_relay):
    # The comparison point: content_sync = "file" fdatasyncs every content file.
    sink = make_sink()
    relay = make_relay(sink.port, '[queue]\ncontent_sync = "file"\n' + WINDOW)
    calls, _ = count_syncs(relay, sink, tmp_path, "file")
    assert calls["syncfs"] == 0, calls
    assert calls["fdatasync"] >= MSGS, calls


def test_content_sync_is_checked(tmp_path, make_relay):
    relay = make_relay(9, '[queue]\ncontent_sync = "never"\n', start=False)
    r = relay.smx("check-config", check=False)
    assert r.returncode != 0
    assert "queue.content_sync" in r.stdout + r.stderr
