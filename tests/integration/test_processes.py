"""server.processes: several smx-smtps processes under one `smx run`, each
with its own event loops' sockets of every SO_REUSEPORT group (bound by the
MCP), its own descriptor limit and its share of max_connections, so that
together they hold more sessions than one process may open files."""
import os
import re
import signal
import subprocess

import pytest

from conftest import BUILD, Raw, wait_until
from test_mcp import kill_during_load
from test_threads import (epoll_registrations, held, mail_from_30_clients, relayed_for_127,
                          reload_trusting_127)

THREE = "[server]\nprocesses = 3\nthreads = 1\n"


def smtps_pids(relay, n):
    return wait_until(lambda: (p := relay.child_pids("smx-smtps")) and len(p) == n and sorted(p),
                      15, "%d smx-smtps processes" % n)


def sessions_by_process(relay, pids, clients):
    """{pid: sessions} for sessions opened by `clients` (a callable opening
    them): the sockets each process's epoll gained meanwhile."""
    before = {p: sum(epoll_registrations(p).values()) for p in pids}
    opened = clients()
    after = {p: sum(epoll_registrations(p).values()) for p in pids}
    return opened, {p: after[p] - before[p] for p in pids}


def test_three_processes_share_the_sessions_and_all_mail_arrives_once(sink, make_relay):
    relay = make_relay(sink.port, THREE)
    pids = smtps_pids(relay, 3)
    wait_until(lambda: relay.log_text().count("(event loop ") == 3, 10, "three loops ready")
    for k in (1, 2, 3):
        relay.log_matching(re.escape("(event loop %d of 3)" % k))
    relay.log_matching(re.escape("of 3 smx-smtps processes (1 loop each)"))
    assert relay.stats()["smtps_connections"] == 3  # a QMGR link each
    clients, gained = sessions_by_process(relay, pids, lambda: held(relay.port, 45))
    assert clients, "a session was refused"
    # The kernel picks a process's socket by a hash of the client's address
    # and port: fewer than 3 of 45 in one of three has a probability of ~1e-6.
    assert sum(gained.values()) >= 45 and min(gained.values()) >= 3, gained
    stats = wait_until(lambda: (s := relay.stats())["smtps_sessions"] == 45 and s, 10,
                       "45 sessions in smx stats")
    loops = {k: v for k, v in stats.items() if re.fullmatch(r"smtps_loop_\d+_sessions", k)}
    assert sorted(loops) == ["smtps_loop_%d_sessions" % i for i in range(3)], stats
    assert sum(loops.values()) == 45 and min(loops.values()) >= 3, (loops, gained)
    for c in clients:
        c.close()

    want = mail_from_30_clients(relay.port, "p")
    wait_until(lambda: sink.count() >= len(want), 60, "150 messages at the sink")
    assert sorted(m["from"] for m in sink.messages()) == want
    took = relay.stop()
    assert took < 5, took
    # Each process makes queue ids of its own stream: 150 messages, 150 ids
    # (the log is complete once they stopped).
    ids = re.findall(r"smtpd\[(\d+)\]: ([0-9A-F]{17}): client=", relay.log_text())
    assert len({i for _, i in ids}) == len(ids) == 150, ids
    streams = {(pid, int(i[13:], 16) >> 11) for pid, i in ids}
    assert len(streams) == 3 and len({s for _, s in streams}) == 3, streams
    for p in pids:
        assert not os.path.exists("/proc/%d" % p) or \
            open("/proc/%d/stat" % p).read().split()[2] == "Z"


def test_max_connections_holds_for_all_processes_together(sink, make_relay):
    """max_connections 6 over 3 processes: the sessions they count in one
    shared page; a process killed with its sessions gives them back."""
    relay = make_relay(sink.port, THREE + "max_connections = 6\n")
    pids = smtps_pids(relay, 3)
    wait_until(lambda: relay.log_text().count("(event loop ") == 3, 10, "all ready")
    relay.wait_probes_ended()
    clients, gained = sessions_by_process(relay, pids, lambda: [Raw(relay.port) for _ in range(30)])
    greeted = [c for c in clients if c.greeting.startswith("220")]
    refused = [c for c in clients if c.greeting.startswith("421")]
    assert len(greeted) + len(refused) == 30, [c.greeting for c in clients]
    assert all("too many connections" in c.greeting for c in refused)
    # One after the other, so no two admissions race: exactly the limit,
    # however unevenly the kernel spread the six.
    assert len(greeted) == 6, [c.greeting for c in clients]
    busiest = max(pids, key=lambda p: gained[p])
    assert gained[busiest] >= 2, gained
    os.kill(busiest, signal.SIGKILL)
    # Its sessions died with it: the others admit as many again.
    wait_until(lambda: (c := Raw(relay.port)).greeting.startswith("220") or c.close(), 10,
               "a session in place of the killed process's")
    for c in clients:
        c.close()


def test_per_client_limit_holds_for_the_processes_together(sink, make_relay):
    # 127.0.0.1 out of relay_networks, so that the per-client limit applies:
    # 4 for both processes together (QMGR's anvil counts them; test_anvil.py).
    relay = make_relay(sink.port, "[server]\nprocesses = 2\nthreads = 1\n"
                                  'max_connections_per_client = 4\nrelay_networks = ["10.0.0.0/8"]')
    smtps_pids(relay, 2)
    relay.wait_probes_ended()
    clients = [Raw(relay.port) for _ in range(20)]
    greeted = [c for c in clients if c.greeting.startswith("220")]
    assert len(greeted) == 4, [c.greeting for c in clients]
    assert all("from 127.0.0.1" in c.greeting for c in clients if c not in greeted)
    for c in clients:
        c.close()


def test_processes_0_runs_enough_for_max_connections_under_the_descriptor_limit(sink, make_relay):
    """With 600 descriptors a process, one holds (600 - 70) / 2 = 265
    sessions; max_connections 1000 takes five processes (200 each and a tenth
    for an uneven spread), and 400 clients are all served."""
    relay = make_relay(sink.port, "[server]\nthreads = 1\nmax_connections = 1000\n", nofile=600)
    pids = smtps_pids(relay, 5)
    relay.log_matching(re.escape("of 5 smx-smtps processes (1 loop each)"))
    # No warning about descriptors (the tests' children run as root: that one is expected).
    assert not [l for l in relay.log_text().splitlines()
                if "warning" in l.lower() and "children run as root" not in l]
    clients, gained = sessions_by_process(relay, pids, lambda: held(relay.port, 400))
    assert clients, "a session was refused"
    assert sum(gained.values()) >= 400 and max(gained.values()) <= 265, gained
    c = Raw(relay.port)
    assert c.cmd("EHLO client.test").startswith("250")
    c.close()
    for c in clients:
        c.close()


def test_each_process_counts_descriptors_for_the_loops_it_runs(sink, make_relay):
    """threads = 0 shares the loops of the CPUs out among the processes; each
    smx-smtps fits its sessions to the loops it was given (with 4 CPUs or
    more, fewer than it would run alone), and holds exactly that many."""
    loops = max(1, max(1, len(os.sched_getaffinity(0)) // 2) // 2)
    fits = (600 - (64 + loops * 6)) // 2
    relay = make_relay(sink.port, "[server]\nprocesses = 2\nmax_connections = 2000\n", nofile=600)
    smtps_pids(relay, 2)
    line = (r"smtpd\[\d+\]: .*server.max_connections = 1000 needs \d+ file descriptors but the "
            r"limit \(RLIMIT_NOFILE\) is 600; using max_connections = %d \([^)]*\) \(this process's share\)"
            % fits)
    wait_until(lambda: len(re.findall(line, relay.log_text())) == 2, 10,
               "each process's warning: %d sessions" % fits)
    assert "server.threads asks for" not in relay.log_text()
    relay.wait_probes_ended()
    # 100 more than both hold: the kernel's hash gives each process at least
    # its share of them (a shortfall of 4 standard deviations otherwise).
    clients = [Raw(relay.port) for _ in range(2 * fits + 100)]
    greeted = [c for c in clients if c.greeting.startswith("220")]
    refused = [c for c in clients if c not in greeted]
    assert len(greeted) == 2 * fits, (len(greeted), {c.greeting for c in refused})
    assert all(c.greeting.startswith("421") for c in refused), {c.greeting for c in refused}
    for c in clients:
        c.close()


def test_too_few_descriptors_even_for_16_processes_is_a_warning(sink, make_relay):
    relay = make_relay(sink.port, "[server]\nthreads = 1\nmax_connections = 100000\n", nofile=600)
    smtps_pids(relay, 16)
    assert re.search(r"each of 16 smx-smtps processes: server.max_connections = 6250 needs 12570 "
                     r"file descriptors but the limit \(RLIMIT_NOFILE\) is 600; using "
                     r"max_connections = 265", relay.log_text()), relay.log_text()[-3000:]


def test_kill9_of_one_process_restarts_it_alone_and_nothing_is_lost(sink, make_relay):
    relay = make_relay(sink.port, THREE)
    old = smtps_pids(relay, 3)
    kill_during_load(relay, sink, "smx-smtps", "kp")
    now = smtps_pids(relay, 3)
    assert len(set(old) & set(now)) == 2, (old, now)
    assert re.search(r"smx-smtps#\d killed by signal 9", relay.log_text())


def test_reload_reaches_every_process(sink, make_relay):
    relay = make_relay(sink.port, THREE + 'relay_networks = ["10.0.0.0/8"]')
    smtps_pids(relay, 3)
    reload_trusting_127(relay)
    # QMGR's, SMTPC's and each SMTPS process's.
    wait_until(lambda: relay.log_text().count("config reloaded from") >= 5, 10,
               "every process reloaded")
    # New sessions, on whichever process accepts them, get the new config.
    relayed_for_127(relay, 30)


def test_processes_is_kept_until_restart_on_reload(sink, make_relay):
    relay = make_relay(sink.port, THREE)
    pids = smtps_pids(relay, 3)
    with open(relay.config) as f:
        text = f.read()
    with open(relay.config, "w") as f:
        f.write(text.replace("processes = 3", "processes = 2"))
    relay.smx("reload")
    wait_until(lambda: "server.processes" in relay.log_text(), 10, "the reload's note")
    assert smtps_pids(relay, 3) == pids
    os.kill(pids[0], signal.SIGTERM)
    assert len(smtps_pids(relay, 3)) == 3


@pytest.mark.parametrize("env, message", [
    ({"SMX_SMTPS_PROCESS": "5/3"}, "SMX_SMTPS_PROCESS=5/3 is not i/n with i < n <= 16"),
    ({"SMX_SMTPS_PROCESS": "0/17"}, "is not i/n with i < n <= 16"),
    ({"SMX_SMTPS_PROCESS": "0/2x"}, "is not i/n"),
    ({"SMX_SMTPS_PROCESS": "0/2"}, "SMX_SMTPS_PROCESS without SMX_SMTPS_COUNTS"),
    ({"SMX_SMTPS_PROCESS": "0/2", "SMX_SMTPS_COUNTS": "0"}, "fd 0 is not the session counts"),
])
def test_a_bad_process_place_stops_smtps_with_a_clear_error(tmp_path, env, message):
    """What the MCP hands smx-smtps is checked: exit 2 naming the problem."""
    r = subprocess.run([os.path.join(BUILD, "smtps", "smx-smtps")], cwd=str(tmp_path),
                       env={**os.environ, **env}, stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert message in r.stderr + r.stdout, r.stderr
