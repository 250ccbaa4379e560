"""Issue 8: one crash-only policy. A bug injected into each process (test-build
fault points, SMX_TEST_PANIC) is logged, the MCP restarts the process, and no
message that got a 250 is lost."""
import re
import os
import smtplib
import time

import pytest

from conftest import BUILD, SCALE, wait_until


def hooks_compiled():
    try:
        with open(os.path.join(BUILD, "libsm", "build_options.hpp")) as f:
            return "SMX_TEST_HOOKS 1" in f.read()
    except OSError:
        return False


needs_hooks = pytest.mark.skipif(not hooks_compiled(),
                                 reason="built without -Dtest_hooks=true (no fault points)")


def send_counted(port, n, tag):
    """Sends n messages, one connection each; a message whose session broke
    before the 250 is sent again once. Returns the Message-IDs that got a 250."""
    accepted = []
    for i in range(n):
        mid = "<%s-%d@client.test>" % (tag, i)
        body = ("Subject: %s %d\r\nMessage-ID: %s\r\n\r\nbody %d\r\n" % (tag, i, mid, i)).encode()
        for attempt in range(5):
            try:
                with smtplib.SMTP("127.0.0.1", port, timeout=30) as c:
                    c.sendmail("s@client.test", ["r%d@example.net" % i], body)
                accepted.append(mid)
                break
            except (smtplib.SMTPException, OSError):
                time.sleep(1)  # the process is being restarted
    return accepted


def message_ids(sink):
    out = []
    for m in sink.messages():
        for line in m["data"].split(b"\r\n"):
            if line.lower().startswith(b"message-id:"):
                out.append(line.split(b":", 1)[1].strip().decode())
                break
    return out


@needs_hooks
@pytest.mark.parametrize("point", ["qmgr:on_result", "smtpc:deliver", "smtps:ta_ack"])
def test_injected_bug_is_logged_restarted_and_loses_nothing(sink, make_relay, tmp_path,
                                                            monkeypatch, point):
    process = point.split(":")[0]
    marker = str(tmp_path / "panicked")
    monkeypatch.setenv("SMX_TEST_PANIC", point)
    monkeypatch.setenv("SMX_TEST_PANIC_ONCE", marker)
    relay = make_relay(sink.port)
    before = relay.child_pids("smx-" + process)
    n = max(5, int(20 * SCALE))
    accepted = send_counted(relay.port, n, process)
    # Delivery (smtpc:deliver) may still be under way when the last 250 comes.
    wait_until(lambda: os.path.exists(marker), 30, "the fault point to be reached")
    wait_until(lambda: "panic: test fault injected at " + point in relay.log_text(), 20,
               "the panic line in the log")
    # Restarted by the MCP (a QMGR restart restarts all three).
    wait_until(lambda: relay.child_pids("smx-" + process) and
               relay.child_pids("smx-" + process) != before, 30, "a new " + process)
    assert len(accepted) == n, "a message could not be sent even after a retry"
    wait_until(lambda: set(accepted) <= set(message_ids(sink)), 60, "every accepted message")
    ids = message_ids(sink)
    assert max(ids.count(m) for m in accepted) <= 2, "delivered more than twice"
    # It aborted (SIGABRT), which the MCP reports, rather than exiting quietly.
    relay.log_matching(re.escape("smx-%s killed by signal 6" % process))
