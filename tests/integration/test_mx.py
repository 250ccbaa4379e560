"""MX delivery against a real DNS server: dnsmasq (Debian dnsmasq-base) on
127.0.0.1, a high port, its own zone data; smx without [routes] (so every
domain goes by its MX) and [client] dns_servers pointing at it. The sinks
listen on 127.0.0.2, .3, ... all on one port, [client] smtp_port."""
import getpass
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import time

import pytest

from conftest import SinkDidNotStart, free_port, send, wait_until
from dns_server import DnsServer

DNSMASQ = shutil.which("dnsmasq") or "/usr/sbin/dnsmasq"
TTL = 3  # seconds, of every local record (--local-ttl)


def query(port, name, qtype):
    """(rcode, answer count) of one UDP query, or None on no answer."""
    pkt = struct.pack(">HHHHHH", 0x5158, 0x0100, 1, 0, 0, 0)
    pkt += b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0"
    pkt += struct.pack(">HH", qtype, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(1)
        s.sendto(pkt, ("127.0.0.1", port))
        try:
            r = s.recv(4096)
        except socket.timeout:
            return None
    return r[3] & 15, struct.unpack(">H", r[6:8])[0], r


def a_record(reply):
    """The address of the last answer of a reply to an A query."""
    return socket.inet_ntoa(reply[-4:])


class Dns:
    def __init__(self, tmp):
        if not os.path.exists(DNSMASQ):
            pytest.skip("dnsmasq is not installed (scripts/test installs dnsmasq-base)")
        self.hosts = os.path.join(tmp, "dns-hosts")  # records a test changes (SIGHUP)
        self.log = os.path.join(tmp, "dnsmasq.log")
        with open(self.hosts, "w") as f:
            f.write("127.0.0.2 mx.ttl.test\n")
        # What dnsmasq forwards servfail.test to: SERVFAIL, which dnsmasq
        # passes on (as a broken authoritative server would make it).
        self.servfail = DnsServer({"servfail.test": "SERVFAIL"})
        # Never answers: dnsmasq forwards timeout.test here and waits.
        self.silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.silent.bind(("127.0.0.1", 0))
        mx = lambda dom, host, pref: "--mx-host=%s,%s,%d" % (dom, host, pref)
        a = lambda host, ip: "--host-record=%s,%s" % (host, ip)
        args = [
            DNSMASQ, "--keep-in-foreground", "--conf-file=/dev/null", "--pid-file=",
            "--no-resolv", "--no-hosts", "--bind-interfaces", "--listen-address=127.0.0.1",
            "--port=%d", "--user=%s" % getpass.getuser(),
            "--log-queries", "--log-facility=%s" % self.log,
            "--local=/test/",  # authoritative for .test: unknown names are NXDOMAIN
            "--local-ttl=%d" % TTL, "--addn-hosts=%s" % self.hosts,
            "--server=/servfail.test/127.0.0.1#%d" % self.servfail.port,
            "--server=/timeout.test/127.0.0.1#%d" % self.silent.getsockname()[1],
            a("a.pref.test", "127.0.0.2"), a("b.pref.test", "127.0.0.3"),
            a("busy.mx.test", "127.0.0.4"), a("down.mx.test", "127.0.0.5"),
            a("bounces.mx.test", "127.0.0.6"), a("me.mx.test", "127.0.0.1"),
            a("nomx.test", "127.0.0.3"), a("self.test", "127.0.0.1"),
            mx("pref.test", "a.pref.test", 10), mx("pref.test", "b.pref.test", 20),
            mx("down.test", "down.mx.test", 10), mx("down.test", "b.pref.test", 20),
            mx("busy.test", "busy.mx.test", 10), mx("busy.test", "b.pref.test", 20),
            mx("equal.test", "a.pref.test", 10), mx("equal.test", "b.pref.test", 10),
            mx("bounces.test", "bounces.mx.test", 10),
            mx("ttl.test", "mx.ttl.test", 10),
            # Loops: an MX at our address, an MX named as our hostname
            # preferred to the only other one, and one behind a better MX.
            mx("loop.test", "me.mx.test", 10),
            mx("loop2.test", "smx.test", 10), mx("loop2.test", "b.pref.test", 20),
            mx("loop3.test", "a.pref.test", 5), mx("loop3.test", "smx.test", 10),
            "--dns-rr=null.test,15,000000",  # MX 0 "." (RFC 7505)
        ]
        # The port is free when chosen but another test's process may take it
        # (UDP or TCP) before dnsmasq binds; then dnsmasq exits and we choose again.
        for attempt in range(5):
            self.port = free_dns_port()
            self.proc = subprocess.Popen([a % self.port if a == "--port=%d" else a for a in args],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            if self._answers():
                return
            err = self.proc.stderr.read().decode()
            if "Address already in use" not in err or attempt == 4:
                raise AssertionError("dnsmasq exited: %s" % err)

    def _answers(self):
        """True once dnsmasq answers; False if it exited."""
        deadline = time.monotonic() + 10
        while query(self.port, "a.pref.test", 1) is None:
            if self.proc.poll() is not None:
                return False
            assert time.monotonic() < deadline, "dnsmasq does not answer"
            time.sleep(0.05)
        return True

    def set_host(self, ip, name):
        with open(self.hosts, "w") as f:
            f.write("%s %s\n" % (ip, name))
        self.proc.send_signal(signal.SIGHUP)  # rereads --addn-hosts, clears its cache
        wait_until(lambda: a_record(query(self.port, name, 1)[2]) == ip, 5, "dnsmasq to reload")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.servfail.stop()
        self.silent.close()


def free_dns_port():
    """A port free for both UDP and TCP on 127.0.0.1: dnsmasq binds both."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u, socket.socket() as t:
            u.bind(("127.0.0.1", 0))
            port = u.getsockname()[1]
            try:
                t.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no port free for both UDP and TCP in 100 tries")


class Env:
    def __init__(self, dns, sinks, relay, smtp_port):
        self.dns, self.sinks, self.relay, self.smtp_port = dns, sinks, relay, smtp_port

    def mail(self, *rcpts, sender="s@bounces.test"):
        send(self.relay.port, sender, list(rcpts), b"Subject: mx\r\n\r\nbody\r\n")

    def count(self, name):
        return self.sinks[name].count()

    def status(self, rcpt, status):
        """The log line giving rcpt this status (waits for it)."""
        pat = re.compile(r"to=<%s>.*status=%s .*" % (re.escape(rcpt), status))
        return wait_until(lambda: pat.search(self.relay.log_text()), 30,
                          "%s for %s" % (status, rcpt)).group(0)


def sinks_on_one_port(make_sink, tries=10):
    """The MX hosts share smtp_port, so every sink needs the same port on its
    own address. A port free on 127.0.0.1 may be taken on 127.0.0.x (a client
    bound there, a process of an earlier test): then all start again on another."""
    for attempt in range(tries):
        port, sinks = free_port(), {}
        try:
            for name, ip, args in [("a", "127.0.0.2", []), ("b", "127.0.0.3", []),
                                   ("busy", "127.0.0.4", ["--busy"]),
                                   ("bounces", "127.0.0.6", [])]:
                sinks[name] = make_sink("--host", ip, "--port", str(port), *args,
                                        sub="sink-%s-%d" % (name, attempt))
            return port, sinks
        except SinkDidNotStart:
            for s in sinks.values():
                s.stop()
    raise AssertionError("no port was free on all of 127.0.0.2-6 in %d tries" % tries)


@pytest.fixture
def env(tmp_path, make_sink, make_relay):
    dns = Dns(str(tmp_path))
    try:
        port, sinks = sinks_on_one_port(make_sink)
        # One message per connection: every delivery looks its MX up again.
        relay = make_relay(0, '[client]\ndns_servers = ["127.0.0.1:%d"]\nsmtp_port = %d\n'
                              'max_msgs_per_connection = 1\n' % (dns.port, port), routes=False)
        yield Env(dns, sinks, relay, port)
    finally:
        dns.stop()


def test_mx_preference_order(env):
    for _ in range(3):
        env.mail("u@pref.test")
    wait_until(lambda: env.count("a") == 3, 30, "3 messages at the preferred MX")
    assert env.count("b") == 0
    assert "relay=a.pref.test[127.0.0.2]" in env.status("u@pref.test", "sent")


def test_failover_when_best_mx_is_down_or_refuses(env):
    env.mail("u@down.test")  # down.mx.test: nothing listens
    env.mail("v@busy.test")  # busy.mx.test: 421 at the greeting
    wait_until(lambda: env.count("b") == 2, 30, "both at the second MX")
    assert env.count("busy") == 0
    assert "relay=b.pref.test[127.0.0.3]" in env.status("u@down.test", "sent")
    assert "relay=b.pref.test[127.0.0.3]" in env.status("v@busy.test", "sent")
    # SMTPC's own lines may reach the log file later than QMGR's.
    wait_until(lambda: "connect to down.mx.test[127.0.0.5]" in env.relay.log_text(), 10,
               "the refused connection logged")
    wait_until(lambda: "busy.mx.test[127.0.0.4]:%d said: sink.test busy" % env.smtp_port
               in env.relay.log_text(), 10, "the 421 logged")


def test_equal_preferences_in_random_order(env):
    n = 20  # both hosts stay unused with probability 2 * 2**-20
    for i in range(n):
        env.mail("u%d@equal.test" % i)
    wait_until(lambda: env.count("a") + env.count("b") == n, 60, "%d messages" % n)
    assert env.count("a") > 0 and env.count("b") > 0, (env.count("a"), env.count("b"))


def test_no_mx_falls_back_to_the_address(env):
    env.mail("u@nomx.test")
    wait_until(lambda: env.count("b") == 1, 30, "the message at nomx.test's A")
    assert "relay=nomx.test[127.0.0.3]" in env.status("u@nomx.test", "sent")


def test_null_mx_and_nxdomain_bounce(env):
    env.mail("u@null.test", "v@nx.test")
    assert "556 5.1.10" in env.status("u@null.test", "bounced")
    assert "does not accept mail" in env.status("u@null.test", "bounced")
    assert "550 5.1.2" in env.status("v@nx.test", "bounced")
    wait_until(lambda: env.count("bounces") >= 1, 30, "the DSN at bounces.test's MX")
    dsn = b"".join(m["data"] for m in env.sinks["bounces"].messages())
    assert b"Status: 5.1.10" in dsn and b"Status: 5.1.2" in dsn, dsn


def test_servfail_and_timeout_are_deferred(env):
    assert query(env.dns.port, "servfail.test", 15)[0] == 2  # dnsmasq says SERVFAIL
    env.mail("u@servfail.test", "v@timeout.test")
    line = env.status("u@servfail.test", "deferred")
    assert "4.4.3" in line and "type=MX" in line, line
    line = env.status("v@timeout.test", "deferred")
    assert "4.4.3" in line and "type=MX" in line, line
    st = env.relay.stats()
    assert st["bounced"] == 0 and st["deferred"] >= 2, st


def test_mx_pointing_back_at_us_is_a_loop(env):
    # loop.test: its only MX is our listen address; loop2.test: our
    # hostname is its best MX; self.test: no MX, its A is ours.
    env.mail("u@loop.test", "v@loop2.test", "w@self.test", "x@loop3.test")
    for rcpt in ("u@loop.test", "v@loop2.test", "w@self.test"):
        line = env.status(rcpt, "bounced")
        assert "5.4.6" in line and "loops back to myself" in line, line
    # loop3.test: a better MX than us takes it.
    wait_until(lambda: env.count("a") == 1, 30, "loop3.test's better MX")
    assert env.count("b") == 0


def test_dns_cache_follows_the_ttl(env):
    env.mail("u@ttl.test")
    wait_until(lambda: env.count("a") == 1, 30, "the first message at 127.0.0.2")
    t0 = time.monotonic()
    env.dns.set_host("127.0.0.3", "mx.ttl.test")
    env.mail("v@ttl.test")  # within the TTL: the cached address
    wait_until(lambda: env.count("a") == 2, 30, "the second message at 127.0.0.2")
    assert time.monotonic() - t0 < TTL, "too slow to test the cache"
    time.sleep(TTL + 0.5)
    env.mail("w@ttl.test")  # past the TTL: the new address
    wait_until(lambda: env.count("b") == 1, 30, "the third message at 127.0.0.3")
    assert env.count("a") == 2
