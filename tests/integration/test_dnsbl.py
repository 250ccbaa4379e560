"""DNSBL and DNSWL at connect (issue 28, item 6), against a real rbldnsd
(Debian package rbldnsd) that the tests start on 127.0.0.1: smx asks it
through [client] dns_servers. relay_networks is 127.0.0.1 alone, so clients
bound to 127.0.0.2 (listed in bl.test) and 127.0.0.3 (listed nowhere) are
screened; the relay takes mail for example.test. Also: a filter that does
not match, a weighted allow list that overrides, a name server that never
answers (the deadline holds), and the pregreet check."""
import os
import shutil
import socket
import struct
import subprocess
import time

import pytest

from conftest import Raw, free_port, wait_until

RBLDNSD = shutil.which("rbldnsd") or "/usr/sbin/rbldnsd"

# ip4set zones: each file's default value (":A:TXT") then the listed
# addresses; bl4.test answers 127.0.0.4 (for filters that want .2).
ZONES = {
    "bl.test": ":127.0.0.2:Listed in bl.test\n127.0.0.2\n",
    "bl4.test": ":127.0.0.4:Listed in bl4.test\n127.0.0.2\n",
    "wl.test": ":127.0.0.2:Allowed by wl.test\n127.0.0.2\n",
}
LISTED, CLEAN = "127.0.0.2", "127.0.0.3"


def dns_query(port, name):
    """The A answers of one UDP query to 127.0.0.1:port (empty: none)."""
    qname = b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0"
    q = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0) + qname + struct.pack(">HH", 1, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(0.5)
        s.sendto(q, ("127.0.0.1", port))
        r, _ = s.recvfrom(4096)
    return struct.unpack(">H", r[6:8])[0]


@pytest.fixture(scope="module")
def rbldnsd(tmp_path_factory):
    if not os.path.exists(RBLDNSD):
        pytest.skip("rbldnsd is not installed (Debian package rbldnsd; scripts/test installs it)")
    d = str(tmp_path_factory.mktemp("rbldnsd"))
    os.chmod(d, 0o755)  # rbldnsd chroots into it and reads its zones as its own user
    args = []
    for zone, text in ZONES.items():
        with open(os.path.join(d, zone), "w") as f:
            f.write(text)
        os.chmod(os.path.join(d, zone), 0o644)
        args.append("%s:ip4set:%s" % (zone, zone))
    port = free_port()
    proc = subprocess.Popen([RBLDNSD, "-n", "-b", "127.0.0.1/%d" % port, "-r", d, "-w", "/",
                             *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def answers():
        if proc.poll() is not None:
            raise AssertionError("rbldnsd exited: %s" % proc.stdout.read())
        try:
            return dns_query(port, "2.0.0.127.bl.test") == 1
        except OSError:
            return False
    try:
        wait_until(answers, 10, "rbldnsd to answer")
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def relay_with(make_relay, sink, dns_port, dnsbl, policy=""):
    return make_relay(sink.port, '[server]\nrelay_networks = ["127.0.0.1/32"]\n'
                      'relay_domains = ["example.test"]\nthreads = 1\nprocesses = 1\n'
                      '[client]\ndns_servers = ["127.0.0.1:%d"]\n[dnsbl]\n%s\n[policy]\n'
                      'client_name_timeout = "1s"\n%s' % (dns_port, dnsbl, policy))


class Client(Raw):
    """Raw from one loopback source address, timing the greeting."""

    def __init__(self, port, source, greet=True):
        t0 = time.monotonic()
        super().__init__(port, source, greet)
        self.greeted_after = time.monotonic() - t0

    def send_mail(self):
        """A whole transaction; the reply that ended it."""
        for line, code in (("EHLO client.test", "250"), ("MAIL FROM:<s@client.test>", "250"),
                           ("RCPT TO:<u@example.test>", "250"), ("DATA", "354")):
            r = self.cmd(line)
            if not r.startswith(code):
                return r
        return self.cmd("Subject: dnsbl\r\n\r\nbody\r\n.")



def blocked_reply(ip, zone):
    return "550 5.7.1 Service unavailable; client [%s] blocked using %s" % (ip, zone)


def test_a_listed_client_is_refused_and_an_unlisted_one_accepted(rbldnsd, make_relay, sink):
    relay = relay_with(make_relay, sink, rbldnsd, 'sites = ["bl.test"]')
    c = Client(relay.port, LISTED)
    assert c.greeting.startswith("220 ")
    assert c.cmd("EHLO client.test") == blocked_reply(LISTED, "bl.test")
    assert c.cmd("MAIL FROM:<s@client.test>") == blocked_reply(LISTED, "bl.test")
    assert c.cmd("QUIT").startswith("221 ")
    c.close()
    log = wait_until(lambda: "disconnect from unknown[127.0.0.2]" in relay.log_text()
                     and relay.log_text(), 10, "the listed session to end")
    assert "DNSBL rank 1 for [127.0.0.2]:" in log
    assert ("NOQUEUE: reject: MAIL from unknown[127.0.0.2]: %s;" % blocked_reply(LISTED, "bl.test")
            in log)

    c = Client(relay.port, CLEAN)
    assert c.send_mail().startswith("250 ")
    c.close()
    wait_until(lambda: sink.count() == 1, 20, "the unlisted client's message")
    # Counted in the metrics (reported by SMTPS each second).
    wait_until(lambda: "dnsbl" in relay.smx("stats", "--json").stdout, 10,
               "the refusals in smx stats")


def test_a_session_of_a_listed_client_ends_after_max_errors(rbldnsd, make_relay, sink):
    relay = relay_with(make_relay, sink, rbldnsd, 'sites = ["bl.test"]')
    c = Client(relay.port, LISTED)
    for _ in range(10):  # server.max_errors
        assert c.cmd("NOOP").startswith("550 5.7.1")
    assert c.reply() == "421 4.7.0 smx.test Error: too many errors"
    assert c.reply() == "<closed>"
    c.close()


def test_action_ignore_only_logs(rbldnsd, make_relay, sink):
    relay = relay_with(make_relay, sink, rbldnsd, 'sites = ["bl.test"]\naction = "ignore"')
    c = Client(relay.port, LISTED)
    assert c.send_mail().startswith("250 ")
    c.close()
    wait_until(lambda: "DNSBL rank 1 for [127.0.0.2]:" in relay.log_text(), 10, "the rank")


def test_a_weighted_allow_list_overrides(rbldnsd, make_relay, sink):
    relay = relay_with(make_relay, sink, rbldnsd,
                       'sites = ["bl.test*2", "wl.test*-5"]\npregreet_wait = "1s"')
    c = Client(relay.port, LISTED, greet=False)
    # Allow-listed: talking first is no longer refused either.
    c.send(b"EHLO early.test\r\n")
    assert c.reply().startswith("220 ")
    assert c.reply().startswith("250")
    c.close()
    wait_until(lambda: "DNSBL rank -3 for [127.0.0.2]:" in relay.log_text(), 10, "the rank")
    c = Client(relay.port, LISTED)
    assert c.send_mail().startswith("250 ")
    c.close()


def test_weights_add_up_to_the_threshold(rbldnsd, make_relay, sink):
    # Two listings of weight 1 reach threshold 2; one does not.
    relay = relay_with(make_relay, sink, rbldnsd,
                       'sites = ["bl.test", "bl4.test"]\nthreshold = 2')
    c = Client(relay.port, LISTED)
    assert c.cmd("EHLO client.test").startswith("550 5.7.1 Service unavailable")
    c.close()
    wait_until(lambda: "DNSBL rank 2 for [127.0.0.2]:" in relay.log_text(), 10, "the rank")


def test_a_filter_that_does_not_match_does_not_list(rbldnsd, make_relay, sink):
    # bl4.test answers 127.0.0.4, which a filter of .2 does not take.
    relay = relay_with(make_relay, sink, rbldnsd,
                       'sites = ["bl4.test=127.0.0.2"]')
    c = Client(relay.port, LISTED)
    assert c.send_mail().startswith("250 ")
    c.close()
    log = wait_until(lambda: "disconnect from unknown[127.0.0.2]" in relay.log_text()
                     and relay.log_text(), 10, "the session's end")
    assert "DNSBL rank" not in log
    relay.stop()
    relay = relay_with(make_relay, sink, rbldnsd,
                       'sites = ["bl4.test=127.0.0.[3..5]*3"]\nthreshold = 3')
    c = Client(relay.port, LISTED)
    assert c.cmd("EHLO client.test") == blocked_reply(LISTED, "bl4.test")
    c.close()


def test_a_name_server_that_never_answers_costs_the_deadline(make_relay, sink):
    # Bound and never read: every query goes unanswered.
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent.bind(("127.0.0.1", 0))
    try:
        relay = relay_with(make_relay, sink, silent.getsockname()[1],
                           'sites = ["bl.test", "bl4.test"]\ntimeout = "1s"')
        c = Client(relay.port, LISTED)
        # The lists and the name are asked at once: one deadline, not three.
        assert c.greeting.startswith("220 ")
        assert 0.9 <= c.greeted_after < 3.5, c.greeted_after
        assert c.send_mail().startswith("250 ")
        c.close()
        log = wait_until(lambda: "hostname lookup of" in relay.log_text() and relay.log_text(),
                         10, "the warnings")
        assert "DNSBL lookup of 2.0.0.127.bl.test: no answer within 1.00s; taken as not listed" in log
        assert "hostname lookup of 127.0.0.2: " in log
    finally:
        silent.close()


def test_a_client_that_talks_before_the_greeting_is_refused(rbldnsd, make_relay, sink):
    relay = relay_with(make_relay, sink, rbldnsd, 'pregreet_wait = "1s"')
    c = Client(relay.port, CLEAN, greet=False)
    c.send(b"EHLO hasty.test\r\n")
    assert c.reply() == "521 5.5.1 Protocol error"
    assert c.reply() == "<closed>"
    c.close()
    log = wait_until(lambda: "PREGREET" in relay.log_text() and relay.log_text(), 10,
                     "the PREGREET line")
    assert "PREGREET 17 after " in log
    assert "from [127.0.0.3]:" in log and ": EHLO hasty.test\\r\\n" in log
    assert "NOQUEUE: reject: CONNECT from unknown[127.0.0.3]: 521 5.5.1 Protocol error" in log

    # A patient client is greeted after the wait, and served.
    c = Client(relay.port, CLEAN)
    assert c.greeted_after >= 0.9
    assert c.send_mail().startswith("250 ")
    c.close()
