"""Reload (`smx reload`, SIGHUP to `smx run`): the running processes take a
changed configuration without a restart (same pids), sessions opened before
keep working, a broken file changes nothing, and keys that need a restart
are named."""
import os
import signal
import smtplib
import ssl
import subprocess
import time

from conftest import SMX, Raw, send, wait_until
from test_tls import make_cert

CHILDREN = ("smx-qmgr", "smx-smtps", "smx-smtpc")


def pids(relay):
    return {name: relay.child_pids(name) for name in CHILDREN}


def rewrite(relay, sink_port, extra=""):
    with open(relay.config, "w") as f:
        f.write(relay.config_text(sink_port, extra))


# The children that re-read the config on SIGHUP.
RELOADING = ("smx-qmgr", "smx-smtpc", "smx-smtps", "smx-pickup")


def reloaded(relay, before):
    """Waits until each child has logged one more "config reloaded" line."""
    children = sum(len(relay.child_pids(name)) for name in RELOADING)
    def count():
        return relay.log_text().count("config reloaded from")
    wait_until(lambda: count() >= before + children, 10, "%d children to reload" % children)


def reload(relay):
    """`smx reload` and the children's log lines; returns its result."""
    before = relay.log_text().count("config reloaded from")
    r = relay.smx("reload")
    # The MCP's own line counts too: one per child beyond it.
    reloaded(relay, before + 1)
    return r


def test_route_change_moves_new_mail_and_keeps_an_open_session(make_sink, make_relay):
    a, b = make_sink(sub="a"), make_sink(sub="b")
    relay = make_relay(a.port)
    send(relay.port, "s@client.test", ["r@example.net"], b"Subject: 1\r\n\r\nto A\r\n")
    wait_until(lambda: a.count() == 1, 30, "the first message at A")
    running = pids(relay)

    # A session opened before the reload, in the middle of a transaction.
    c = Raw(relay.port)
    assert c.cmd("EHLO client.test").startswith("250")
    assert c.cmd("MAIL FROM:<early@client.test>").startswith("250")

    rewrite(relay, b.port, '[routes]\ndefault = "[127.0.0.1]:%d"' % b.port)
    r = reload(relay)
    assert "config reloaded" in r.stdout
    assert pids(relay) == running

    send(relay.port, "s@client.test", ["r@example.net"], b"Subject: 2\r\n\r\nto B\r\n")
    wait_until(lambda: b.count() == 1, 30, "the message after the reload at B")

    assert c.cmd("RCPT TO:<r@example.net>").startswith("250")
    assert c.cmd("DATA").startswith("354")
    assert c.cmd("Subject: 3\r\n\r\nopened before\r\n.").startswith("250")
    c.cmd("QUIT")
    c.close()
    wait_until(lambda: b.count() == 2, 30, "the early session's message")
    assert a.count() == 1
    assert pids(relay) == running


def test_added_relay_network_is_accepted(sink, make_relay):
    outside = '[server]\nrelay_networks = ["192.0.2.0/24"]\n'
    relay = make_relay(sink.port, outside)
    c = Raw(relay.port)
    c.cmd("EHLO client.test")
    c.cmd("MAIL FROM:<s@client.test>")
    assert c.cmd("RCPT TO:<r@example.net>").startswith("554")

    rewrite(relay, sink.port, '[server]\nrelay_networks = ["192.0.2.0/24", "127.0.0.0/8"]\n')
    reload(relay)
    send(relay.port, "s@client.test", ["r@example.net"], b"Subject: t\r\n\r\nbody\r\n")
    wait_until(lambda: sink.count() == 1, 30, "mail from the added network")
    # The session from before still has the old networks.
    assert c.cmd("RCPT TO:<r2@example.net>").startswith("554")
    c.close()


def peer_cert(port):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as c:
        c.starttls(context=ctx)
        return c.sock.getpeercert(binary_form=True)


def der(cert_path):
    with open(cert_path) as f:
        return ssl.PEM_cert_to_DER_cert(f.read())


def test_new_certificate_for_new_starttls_sessions(sink, make_relay, tmp_path):
    old = make_cert(str(tmp_path), "old", "old.test")
    new = make_cert(str(tmp_path), "new", "new.test")
    tls = '[server]\ntls_cert = "%s"\ntls_key = "%s"\n'
    relay = make_relay(sink.port, tls % old)
    assert peer_cert(relay.port) == der(old[0])
    rewrite(relay, sink.port, tls % new)
    reload(relay)
    assert peer_cert(relay.port) == der(new[0])


def test_raised_log_level(sink, make_relay):
    relay = make_relay(sink.port, '[log]\nlevel = "warn"')
    send(relay.port, "s@client.test", ["r@example.net"], b"Subject: 1\r\n\r\nbody\r\n")
    wait_until(lambda: sink.count() == 1, 30, "the first message")
    assert "connect from" not in relay.log_text()

    rewrite(relay, sink.port, '[log]\nlevel = "info"')
    # At warn the children's "config reloaded" lines are logged at the new
    # level, so reload() can wait for them.
    reload(relay)
    send(relay.port, "s@client.test", ["r@example.net"], b"Subject: 2\r\n\r\nbody\r\n")
    wait_until(lambda: "connect from" in relay.log_text(), 10, "an info line from smx-smtps")


def test_broken_config_keeps_the_running_one(make_sink, make_relay):
    a, b = make_sink(sub="a"), make_sink(sub="b")
    relay = make_relay(a.port)
    running = pids(relay)
    # A route to B, but a bad value elsewhere: nothing of it may apply.
    rewrite(relay, b.port, '[routes]\ndefault = "[127.0.0.1]:%d"\n[server]\nmax_recipients = "x"'
            % b.port)
    r = relay.smx("reload", check=False)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "server.max_recipients" in r.stderr
    # The MCP checks the file too, and says so in its log (SIGHUP's reply).
    os.kill(relay.proc.pid, signal.SIGHUP)
    wait_until(lambda: "keeping the running configuration" in relay.log_text(), 10,
               "the MCP's refusal in the log")
    assert "config reloaded" not in relay.log_text()
    send(relay.port, "s@client.test", ["r@example.net"], b"Subject: 1\r\n\r\nbody\r\n")
    wait_until(lambda: a.count() == 1, 30, "mail to the old route")
    assert b.count() == 0
    assert pids(relay) == running


def test_sighup_does_what_smx_reload_does(make_sink, make_relay):
    a, b = make_sink(sub="a"), make_sink(sub="b")
    relay = make_relay(a.port)
    running = pids(relay)
    rewrite(relay, b.port, '[routes]\ndefault = "[127.0.0.1]:%d"' % b.port)
    before = relay.log_text().count("config reloaded from")
    os.kill(relay.proc.pid, signal.SIGHUP)
    reloaded(relay, before + 1)
    send(relay.port, "s@client.test", ["r@example.net"], b"Subject: 1\r\n\r\nbody\r\n")
    wait_until(lambda: b.count() == 1, 30, "the message at B")
    assert a.count() == 0
    assert pids(relay) == running


def test_changed_listen_address_needs_a_restart(sink, make_relay):
    relay = make_relay(sink.port)
    old_port = relay.port
    with open(relay.config) as f:
        text = f.read()
    with open(relay.config, "w") as f:
        f.write(text.replace("127.0.0.1:%d" % old_port, "127.0.0.1:%d" % (old_port ^ 1)))
    r = reload(relay)
    assert "needs a restart" in r.stdout and "server.listen" in r.stdout, r.stdout
    wait_until(lambda: "keeping server.listen" in relay.log_text(), 10,
               "the children naming server.listen")
    send(old_port, "s@client.test", ["r@example.net"], b"Subject: 1\r\n\r\nbody\r\n")
    wait_until(lambda: sink.count() == 1, 30, "mail through the old listener")


def test_reload_without_a_running_smx(tmp_path):
    cfg = tmp_path / "smx.toml"
    cfg.write_text('[queue]\nrun_dir = "%s"\n' % (tmp_path / "run"))
    r = subprocess.run([SMX, "reload", "-c", str(cfg)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 1
    assert "not running" in r.stderr


def test_mcp_refusal_reaches_smx_reload(sink, make_relay, tmp_path):
    """The MCP re-reads its own file: when that one is broken, `smx reload`
    with a good file of the same run_dir still exits 2 with the MCP's reason."""
    relay = make_relay(sink.port)
    good = tmp_path / "good.toml"
    with open(relay.config) as f:
        good.write_text(f.read())
    rewrite(relay, sink.port, '[server]\nmax_errors = -1')
    r = subprocess.run([SMX, "reload", "-c", str(good)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert r.stderr.startswith("smx: reload: config error: server.max_errors"), r.stderr
    assert "keeping the running configuration" in r.stderr


# Reload at any moment after smx.pid exists is answered within a second
# (issue 26, item 2). A reload takes about a tenth of that: the bound is for
# a slow machine, and the old fault waited 10 s.
ANSWER_WITHIN = 1.0


def timed_reload(relay):
    t0 = time.monotonic()
    r = relay.smx("reload")
    took = time.monotonic() - t0
    assert took < ANSWER_WITHIN, "smx reload took %.2f s: %s" % (took, r.stdout)
    assert "config reloaded" in r.stdout, r.stdout
    return took


def test_reload_right_after_start_is_applied_at_once(make_sink, make_relay):
    a, b = make_sink(sub="a"), make_sink(sub="b")
    relay = make_relay(a.port, start=False)
    relay.log = open(relay.log_path, "ab")
    relay.proc = subprocess.Popen([SMX, "run", "-c", relay.config], stdout=relay.log,
                                  stderr=subprocess.STDOUT)
    pid_file = os.path.join(relay.run_dir, "smx.pid")

    def pid_written():
        try:
            with open(pid_file) as f:
                return f.read().strip() == str(relay.proc.pid)
        except OSError:
            return False
    wait_until(pid_written, 20, "smx.pid")
    # Mostly before "ready", while QMGR starts (a fast machine may be
    # ready first; the next test makes the wait for QMGR certain).
    rewrite(relay, b.port, '[routes]\ndefault = "[127.0.0.1]:%d"' % b.port)
    timed_reload(relay)
    wait_until(relay.greets, 20, "smx to answer")
    send(relay.port, "s@client.test", ["r@example.net"], b"Subject: 1\r\n\r\nbody\r\n")
    wait_until(lambda: b.count() == 1, 30, "the message at the reloaded route")
    assert a.count() == 0


def test_reload_while_qmgr_restarts_is_applied_at_once(make_sink, make_relay):
    a, b = make_sink(sub="a"), make_sink(sub="b")
    relay = make_relay(a.port)
    [qmgr] = relay.child_pids("smx-qmgr")
    os.kill(qmgr, signal.SIGKILL)
    rewrite(relay, b.port, '[routes]\ndefault = "[127.0.0.1]:%d"' % b.port)
    # While the workers stop and QMGR waits out its backoff.
    timed_reload(relay)
    # While the MCP waits for the new QMGR to answer (stopped, it cannot,
    # unless it did before the stop).
    [new] = wait_until(lambda: [p for p in relay.child_pids("smx-qmgr") if p != qmgr], 30,
                       "QMGR started again")
    os.kill(new, signal.SIGSTOP)
    try:
        timed_reload(relay)
    finally:
        os.kill(new, signal.SIGCONT)
    # And until it answers and the workers are back.
    while not relay.greets():
        timed_reload(relay)
    send(relay.port, "s@client.test", ["r@example.net"], b"Subject: 1\r\n\r\nbody\r\n")
    wait_until(lambda: b.count() == 1, 30, "the message at the reloaded route")
    assert a.count() == 0
    assert relay.child_pids("smx-qmgr") == [new]


def test_twenty_reloads_at_once_are_each_answered(sink, make_relay):
    relay = make_relay(sink.port)
    running = pids(relay)
    procs = [subprocess.Popen([SMX, "reload", "-c", relay.config], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(20)]
    for p in procs:
        out, err = p.communicate(timeout=30)
        assert p.returncode == 0 and "config reloaded" in out, (p.returncode, out, err)
    assert pids(relay) == running
    send(relay.port, "s@client.test", ["r@example.net"], b"Subject: 1\r\n\r\nbody\r\n")
    wait_until(lambda: sink.count() == 1, 30, "mail after the burst")
