"""server.threads: several event loops in smx-smtps, each accepting on its
own SO_REUSEPORT listening socket of every address (bound by the MCP, which
keeps them), so that the kernel spreads connections over the loops; the
connection limits hold for the process."""
import os
import re
import signal
import socket
import threading

from conftest import Raw, free_port, send, wait_until
from test_mcp import kill_during_load

TWO = "[server]\nthreads = 2\n"


def smtps_pid(relay):
    return wait_until(lambda: relay.child_pids("smx-smtps"), 10, "smx-smtps")[0]


def epoll_registrations(pid):
    """{epoll fd: number of descriptors it watches} of a process: each
    event loop has one epoll instance, and a session's socket is in the
    epoll of the loop that accepted it."""
    out = {}
    fd_dir = "/proc/%d/fd" % pid
    for fd in os.listdir(fd_dir):
        try:
            if os.readlink(os.path.join(fd_dir, fd)) != "anon_inode:[eventpoll]":
                continue
            with open("/proc/%d/fdinfo/%s" % (pid, fd)) as f:
                out[int(fd)] = sum(line.startswith("tfd:") for line in f)
        except OSError:
            continue
    return out


def loop_counts(relay):
    """Connections each loop accepted, from the lines SMTPS logs when it
    stops: {loop: count} of the last run."""
    found = re.findall(r"event loop (\d+) of (\d+): (\d+) connections accepted",
                       relay.log_text())
    return {int(i): int(n) for i, _, n in found}


def greet_and_quit(host, port):
    with socket.create_connection((host, port), timeout=10) as s:
        f = s.makefile("rb")
        assert f.readline().startswith(b"220")
        s.sendall(b"QUIT\r\n")
        assert f.readline().startswith(b"221")


def held(port, n):
    """n sessions that got their 220, held open; else None (all closed): a
    limit may still count the start-up probe until SMTPS has seen it close."""
    clients = [Raw(port) for _ in range(n)]
    if all(c.greeting.startswith("220") for c in clients):
        return clients
    for c in clients:
        c.close()
    return None


def loop_sessions(stats):
    """smx stats' sessions of each SMTPS loop, by loop index."""
    return {int(m.group(1)): v for k, v in stats.items()
            if (m := re.fullmatch(r"smtps_loop_(\d+)_sessions", k))}


def test_stats_show_each_loops_sessions_and_the_open_and_waiting_transactions(sink, make_relay):
    """What SMTPS reports each second: the sessions of each loop (the same as
    the sockets each loop's epoll gained), transactions open, and MAILs
    waiting for server.max_transactions (here 1 a loop)."""
    relay = make_relay(sink.port, TWO + "max_transactions = 2\ntransaction_wait_ms = 60000\n")
    wait_until(lambda: relay.log_text().count("(event loop ") == 2, 10, "both loops ready")
    pid = smtps_pid(relay)
    before = epoll_registrations(pid)
    clients = held(relay.port, 40)
    assert clients, "a session was refused"
    after = epoll_registrations(pid)
    gained = sorted((n for n in (after.get(fd, 0) - n for fd, n in before.items()) if n), reverse=True)
    stats = wait_until(lambda: (s := relay.stats())["smtps_sessions"] == 40 and s, 10,
                       "40 sessions in smx stats")
    assert sorted(loop_sessions(stats).values(), reverse=True) == gained, (stats, gained)
    assert set(loop_sessions(stats)) == {0, 1}
    assert stats["smtps_transactions"] == 0 and stats["smtps_transactions_waiting"] == 0
    for c in clients:
        c.send(b"EHLO client.test\r\nMAIL FROM:<a@client.test>\r\n")
    # One transaction open on each loop, every other MAIL waiting.
    wait_until(lambda: (s := relay.stats())["smtps_transactions"] == 2
               and s["smtps_transactions_waiting"] == 38, 10,
               "2 open and 38 waiting in %s" % relay.stats())
    # Those who got their 250 end theirs; the places pass on, and as each
    # client is gone, everything drains.
    for c in clients:
        c.close()
    wait_until(lambda: (s := relay.stats())["smtps_sessions"] == 0 and s["smtps_transactions"] == 0
               and s["smtps_transactions_waiting"] == 0 and sum(loop_sessions(s).values()) == 0, 15,
               "nothing left in %s" % relay.stats())
    relay.stop()
    assert "panic" not in relay.log_text()


def test_two_loops_both_serve_sessions_and_all_mail_arrives(sink, make_relay):
    relay = make_relay(sink.port, TWO)
    wait_until(lambda: relay.log_text().count("(event loop ") == 2, 10, "both loops ready")
    assert relay.stats()["smtps_connections"] == 2  # one QMGR link per loop
    pid = smtps_pid(relay)
    before = epoll_registrations(pid)
    clients = held(relay.port, 40)
    assert clients, "a session was refused"
    after = epoll_registrations(pid)
    gained = sorted((after.get(fd, 0) - n for fd, n in before.items()), reverse=True)
    assert sum(gained) >= 40, (before, after)
    # The kernel picks a loop's socket by a hash of the client's address and
    # port: fewer than 5 of 40 on a loop has a probability of about 2e-7.
    assert gained[1] >= 5, "one loop took (nearly) every session: %s -> %s" % (before, after)
    for c in clients:
        c.close()
    want = mail_from_30_clients(relay.port, "t")
    wait_until(lambda: sink.count() >= 150, 60, "150 messages at the sink")
    assert sorted({m["from"] for m in sink.messages()}) == want


def mail_from_30_clients(port, tag):
    """30 clients at once, 5 messages each; the senders, sorted."""
    errors = []

    def client(k):
        try:
            for i in range(5):
                send(port, "%s%d-%d@client.test" % (tag, k, i), ["r@dest.test"],
                     b"Subject: t\r\n\r\nbody\r\n")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=client, args=(k,)) for k in range(30)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:3]
    return sorted("%s%d-%d@client.test" % (tag, k, i) for k in range(30) for i in range(5))


def test_max_connections_holds_across_loops(sink, make_relay):
    relay = make_relay(sink.port, TWO + "max_connections = 6")
    sessions = wait_until(lambda: held(relay.port, 6), 10, "six sessions greeted")
    for _ in range(10):
        c = Raw(relay.port)
        assert c.greeting.startswith("421") and "too many connections" in c.greeting, c.greeting
        c.close()
    sessions.pop().close()
    wait_until(lambda: Raw(relay.port).greeting.startswith("220"), 10, "a freed slot")
    for c in sessions:
        c.close()


def test_per_client_limit_holds_across_loops(sink, make_relay):
    # 127.0.0.1 out of relay_networks, so that the per-client limit applies.
    relay = make_relay(sink.port, TWO + 'max_connections_per_client = 4\n'
                                        'relay_networks = ["10.0.0.0/8"]')
    sessions = wait_until(lambda: held(relay.port, 4), 10, "four sessions greeted")
    for _ in range(10):
        c = Raw(relay.port)
        assert c.greeting.startswith("421") and "from 127.0.0.1" in c.greeting, c.greeting
        c.close()
    for c in sessions:
        c.close()
    wait_until(lambda: Raw(relay.port).greeting.startswith("220"), 10, "the client admitted again")


def test_reload_reaches_every_loop(sink, make_relay):
    relay = make_relay(sink.port, TWO + 'relay_networks = ["10.0.0.0/8"]')
    c = Raw(relay.port)
    c.cmd("EHLO client.test")
    c.cmd("MAIL FROM:<a@client.test>")
    assert c.cmd("RCPT TO:<r@dest.test>").startswith("554"), "127.0.0.1 is not trusted yet"
    c.close()
    reload_trusting_127(relay)
    # New sessions, on whichever loop accepts them, get the new config.
    relayed_for_127(relay, 20)


def reload_trusting_127(relay):
    """relay_networks from 10.0.0.0/8 to 127.0.0.0/8, and `smx reload`."""
    with open(relay.config) as f:
        text = f.read()
    with open(relay.config, "w") as f:
        f.write(text.replace('relay_networks = ["10.0.0.0/8"]', 'relay_networks = ["127.0.0.0/8"]'))
    relay.smx("reload")


def relayed_for_127(relay, n):
    """n new sessions from 127.0.0.1 may each relay."""
    for k in range(n):
        c = Raw(relay.port)
        c.cmd("EHLO client.test")
        c.cmd("MAIL FROM:<a@client.test>")
        assert c.cmd("RCPT TO:<r@dest.test>").startswith("250"), k
        c.close()


def test_kill9_of_threaded_smtps_is_restarted_and_nothing_is_lost(sink, make_relay):
    relay = make_relay(sink.port, TWO)
    kill_during_load(relay, sink, "smx-smtps", "ks2")
    wait_until(lambda: relay.log_text().count("(event loop 2 of 2)") == 2, 10,
               "the restarted smx-smtps ready on both loops")
    # Served on every socket of the group, not only on the ones a loop of
    # the new process happens to share with the old.
    greetings = greeted_in_parallel(relay.port, 20)
    assert all(g.startswith("220") for g in greetings), greetings


def test_the_kernel_spreads_connections_over_the_loops(sink, make_relay):
    relay = make_relay(sink.port, TWO)
    relay.log_matching(re.escape("with 2 sockets each, one per event loop of 1 smx-smtps process (2 loops each)"))
    for _ in range(40):
        greet_and_quit("127.0.0.1", relay.port)
    relay.stop()
    counts = loop_counts(relay)
    assert sorted(counts) == [1, 2], relay.log_text()[-2000:]
    # Ours and the start-up probes; each loop at least 5 of them.
    assert sum(counts.values()) >= 40 and min(counts.values()) >= 5, counts


def test_several_listen_addresses_each_spread_over_the_loops(sink, make_relay):
    relay = make_relay(sink.port, start=False)
    second = free_port()
    with open(relay.config, "w") as f:
        f.write(relay.config_text(sink.port, TWO + 'listen = ["127.0.0.1:%d", "127.0.0.2:%d"]'
                                  % (relay.port, second)))
    relay.start()
    relay.log_matching(re.escape("with 2 sockets each"))
    with open("/proc/net/tcp") as f:
        listening = [l.split()[1] for l in f.read().splitlines()[1:] if l.split()[3] == "0A"]
    ours = ["0100007F:%04X" % relay.port, "0200007F:%04X" % second]
    assert sorted(a for a in listening if a in ours) == sorted(ours * 2), listening
    for _ in range(20):
        greet_and_quit("127.0.0.2", second)
    send(relay.port, "two@client.test", ["r@dest.test"], b"Subject: t\r\n\r\nbody\r\n")
    wait_until(lambda: sink.count() >= 1, 30, "the message at the sink")
    relay.stop()
    counts = loop_counts(relay)
    assert sorted(counts) == [1, 2] and min(counts.values()) >= 2, counts


def test_one_loop_still_serves(sink, make_relay):
    relay = make_relay(sink.port, "[server]\nthreads = 1\n")
    relay.log_matching(re.escape("with 1 socket each"))
    wait_until(lambda: "(event loop 1 of 1)" in relay.log_text(), 10, "the loop ready")
    for i in range(5):
        send(relay.port, "one%d@client.test" % i, ["r@dest.test"], b"Subject: t\r\n\r\nbody\r\n")
    wait_until(lambda: sink.count() >= 5, 30, "five messages at the sink")
    relay.stop()
    counts = loop_counts(relay)
    assert list(counts) == [1] and counts[1] >= 5, counts


def greeted_in_parallel(port, n):
    """n clients connecting at once; the greeting each got (or the error)."""
    out = [None] * n

    def one(i):
        try:
            out[i] = Raw(port).greeting
        except OSError as e:
            out[i] = repr(e)
    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return out


def test_connections_queued_while_smtps_is_down_are_served_after_its_restart(sink, make_relay):
    relay = make_relay(sink.port, TWO)
    old = smtps_pid(relay)
    os.kill(old, signal.SIGKILL)
    wait_until(lambda: "smx-smtps killed by signal 9" in relay.log_text(), 10, "the crash seen")
    # The MCP holds every socket of the group: these wait in their accept
    # queues (the restart comes after a 1 s backoff) and are then greeted.
    greetings = greeted_in_parallel(relay.port, 20)
    assert all(g.startswith("220") for g in greetings), greetings
    assert smtps_pid(relay) != old


def test_threads_change_waits_for_a_restart_of_smx_run(sink, make_relay):
    relay = make_relay(sink.port, TWO)
    with open(relay.config) as f:
        text = f.read()
    with open(relay.config, "w") as f:
        f.write(text.replace("threads = 2", "threads = 3"))
    out = relay.smx("reload").stdout
    assert "needs a restart" in out and "server.threads" in out, out
    # A restarted SMTPS reads threads = 3 but runs a loop per socket group
    # the MCP bound at its start: none of them goes unserved.
    old = smtps_pid(relay)
    os.kill(old, signal.SIGKILL)
    wait_until(lambda: "server.threads asks for 3 event loops; running 2" in relay.log_text(), 15,
               "the restarted smx-smtps")
    # The killed one's own ready lines may never have left its log buffer:
    # look for the new process's.
    wait_until(lambda: any(int(pid) != old for pid in re.findall(
        r"smtpd\[(\d+)\]: ready: .*\(event loop 2 of 2\)", relay.log_text())), 10,
               "both loops of the restarted smx-smtps ready")
    assert "of 3)" not in relay.log_text()
    greetings = greeted_in_parallel(relay.port, 20)
    assert all(g.startswith("220") for g in greetings), greetings
