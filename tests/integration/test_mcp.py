"""The MCP: start-up, supervision and restart of children, clean stop, config checks."""
import concurrent.futures
import os
import re
import signal
import smtplib
import subprocess
import threading
import time

from conftest import SMX, wait_until


def run_load(relay, n_sessions, per_session, tag):
    """Sends messages until done; returns the senders that got a 250."""
    accepted, lock = [], threading.Lock()

    def session(k):
        i = 0
        while i < per_session:
            try:
                with smtplib.SMTP("127.0.0.1", relay.port, timeout=30) as c:
                    while i < per_session:
                        sender = "%s-%d-%d@client.test" % (tag, k, i)
                        i += 1
                        c.sendmail(sender, ["x@example.net"],
                                   b"Subject: load\r\n\r\n" + b"line\r\n" * 50)
                        with lock:
                            accepted.append(sender)
            except (smtplib.SMTPException, OSError):
                time.sleep(0.2)  # the server went away mid-session: reconnect

    with concurrent.futures.ThreadPoolExecutor(n_sessions) as ex:
        list(ex.map(session, range(n_sessions)))
    return accepted


def kill_under_load(relay, load, rng, max_kills, choices, pause):
    """kill -9 of a random choice of children (one list of names from
    choices) at random moments (pause: seconds, low and high) while the load
    thread runs, waiting each time for the MCP to bring them all back.
    Returns the number of blows."""
    kills = 0
    while load.is_alive() and kills < max_kills:
        time.sleep(rng.uniform(*pause))
        for v in rng.choice(choices):
            for p in relay.child_pids(v):
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass  # gone already: SMTPS and SMTPC exit when QMGR, killed first, goes
        kills += 1
        wait_until(lambda: all(relay.child_pids(v) for v in ("smx-qmgr", "smx-smtps", "smx-smtpc")),
                   60, "all children back")
    return kills


def kill_during_load(relay, sink, child, tag):
    old = wait_until(lambda: relay.child_pids(child), 10, child)
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("acc", run_load(relay, 10, 40, tag)))
    t.start()
    time.sleep(0.5)
    os.kill(old[0], signal.SIGKILL)
    new = wait_until(lambda: [p for p in relay.child_pids(child) if p not in old], 15,
                     "a restarted " + child)
    assert new
    t.join(120)
    accepted = result["acc"]
    assert len(accepted) > 100
    wait_until(lambda: {m["from"] for m in sink.messages()} >= set(accepted), 60,
               "every accepted message at the sink")
    froms = [m["from"] for m in sink.messages()]
    dupes = len(froms) - len(set(froms))
    print("%s: killed %s, accepted %d, duplicates %d" % (tag, child, len(accepted), dupes))
    # One of several smx-smtps processes is named by its number: smx-smtps#2.
    assert re.search(r"%s(#\d+)? killed by signal 9" % child, relay.log_text()), \
        "MCP did not log the crash"


def test_kill9_smtpc_is_restarted_and_nothing_is_lost(sink, make_relay):
    relay = make_relay(sink.port)
    kill_during_load(relay, sink, "smx-smtpc", "kc")


def test_kill9_smtps_is_restarted_and_nothing_is_lost(sink, make_relay):
    relay = make_relay(sink.port)
    kill_during_load(relay, sink, "smx-smtps", "ks")


def test_sigterm_stops_everything_within_5s(sink, make_relay):
    relay = make_relay(sink.port)
    children = [p for n in ("smx-qmgr", "smx-smtps", "smx-smtpc") for p in relay.child_pids(n)]
    assert len(children) == 3
    took = relay.stop()
    assert took < 5, took
    for p in children:
        assert not os.path.exists("/proc/%d" % p) or open("/proc/%d/stat" % p).read().split()[2] == "Z"


def test_check_config_reports_the_key(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[server]\nlisten = ["127.0.0.1:70000"]\n')
    r = subprocess.run([SMX, "check-config", "-c", str(bad)], capture_output=True, text=True)
    assert r.returncode == 2
    assert "server.listen" in r.stderr
    r = subprocess.run([SMX, "run", "-c", str(bad)], capture_output=True, text=True, timeout=10)
    assert r.returncode == 2
    assert "server.listen" in r.stderr
    good = tmp_path / "good.toml"
    good.write_text('[server]\nlisten = ["127.0.0.1:2600"]\n')
    r = subprocess.run([SMX, "check-config", "-c", str(good)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
