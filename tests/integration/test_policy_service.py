"""Policy delegation (postfix's SMTPD_POLICY_README; docs/policy.md, Policy
services) against a real smx run: the real postgrey and postfix-policyd-spf-python
started here, and a scripted policy server for every answer and failure.

Clients connect from 127.0.0.2, outside relay_networks (127.0.0.1/32)."""
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest

from conftest import Raw, free_port, wait_until
from dns_server import DnsServer

SERVER = """
[server]
relay_networks = ["127.0.0.1/32"]
relay_domains = ["example.org"]
max_errors = 100
processes = 1
threads = 1
"""


def config(service, extra=""):
    return SERVER + '[policy]\npolicy_services = ["%s"]\n%s' % (service, extra)


class PolicyServer:
    """A scripted policy service on 127.0.0.1. answer(request) gives the octets
    to send back for a request (a dict of its attributes), None to say nothing
    (the connection stays open), or "close" to close the connection."""

    def __init__(self, answer):
        self.answer = answer
        self.requests = []      # (connection number, request dict) in arrival order
        self.times = []         # time.monotonic() of each request
        self.connections = 0
        self.closed = set()     # connections smx closed
        self.close_after_answer = False  # each connection answers once
        self.lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.spec = "inet:127.0.0.1:%d" % self.port
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
                n = self.connections
            threading.Thread(target=self._serve, args=(conn, n), daemon=True).start()

    def _serve(self, conn, n):
        buf = b""
        with conn:
            while True:
                while b"\n\n" not in buf:
                    try:
                        chunk = conn.recv(65536)
                    except OSError:
                        chunk = b""
                    if not chunk:
                        with self.lock:
                            self.closed.add(n)
                        return
                    buf += chunk
                raw, buf = buf.split(b"\n\n", 1)
                req = dict(line.split("=", 1) for line in raw.decode().split("\n"))
                with self.lock:
                    self.requests.append((n, req))
                    self.times.append(time.monotonic())
                out = self.answer(req)
                if out == "close":
                    return
                if out is not None:
                    conn.sendall(out.encode() if isinstance(out, str) else out)
                if self.close_after_answer:
                    return

    def stop(self):
        self.sock.close()


@pytest.fixture
def policy_server():
    made = []

    def make(answer):
        s = PolicyServer(answer)
        made.append(s)
        return s
    yield make
    for s in made:
        s.stop()


def by_recipient(table, default="action=DUNNO\n\n"):
    """Answers by the recipient's local part: table[local] is the action."""
    def answer(req):
        local = req.get("recipient", "").split("@")[0]
        if local not in table:
            return default
        a = table[local]
        return a if a is None or a == "close" or a.startswith("action=") or a == "garbage\n\n" \
            else "action=%s\n\n" % a
    return answer


def session(port, rcpts, sender="s@sender.test", helo="client.test", src="127.0.0.2",
            data=True, body="Subject: policy\r\n\r\nbody\r\n."):
    """EHLO, MAIL, each RCPT and DATA when one was taken: the replies."""
    c = Raw(port, src)
    replies = {"greeting": c.greeting, "ehlo": c.cmd("EHLO " + helo).splitlines()[-1],
               "mail": c.cmd("MAIL FROM:<%s>" % sender)}
    for r in rcpts:
        replies[r] = c.cmd("RCPT TO:<%s>" % r)
    if data and any(replies[r].startswith("250") for r in rcpts):
        replies["354"] = c.cmd("DATA")
        if replies["354"].startswith("354"):
            replies["data"] = c.cmd(body)
    c.cmd("QUIT")
    c.close()
    return replies


def headers(msg):
    """The header field names of a message at the sink, in order."""
    head = msg["data"].split(b"\r\n\r\n", 1)[0].decode()
    return [line.split(":", 1)[0] for line in head.split("\r\n") if line and line[0] not in " \t"]


def test_every_answer_as_access_5_says(sink, make_relay, policy_server):
    srv = policy_server(by_recipient({
        "ok": "OK", "dunno": "DUNNO", "reject": "REJECT", "text": "REJECT 5.7.2 not this one",
        "defer": "DEFER", "code": "451 4.7.9 come back later", "five": "550 go away",
        "dip": "DEFER_IF_PERMIT Greylisted", "dir": "DEFER_IF_REJECT maybe",
        "warn": "WARN looks odd", "info": "INFO noted", "typo": "REJCET",
        "prepend": "PREPEND X-Policy: checked by the test",
        "hold": "HOLD quarantined by policy"}))
    relay = make_relay(sink.port, config(srv.spec))
    r = session(relay.port, ["ok@example.org", "dunno@example.org", "reject@example.org",
                             "text@example.org", "defer@example.org", "code@example.org",
                             "five@example.org", "dip@example.org", "dir@example.org",
                             "warn@example.org", "info@example.org", "typo@example.org",
                             "prepend@example.org", "elsewhere@other.test"])
    assert r["ok@example.org"].startswith("250")
    assert r["dunno@example.org"].startswith("250")
    assert r["reject@example.org"] == \
        "554 5.7.1 <reject@example.org>: Recipient address rejected: Access denied"
    assert r["text@example.org"] == \
        "554 5.7.2 <text@example.org>: Recipient address rejected: not this one"
    assert r["defer@example.org"] == \
        "450 4.7.1 <defer@example.org>: Recipient address rejected: Access denied"
    assert r["code@example.org"] == \
        "451 4.7.9 <code@example.org>: Recipient address rejected: come back later"
    assert r["five@example.org"] == "550 5.7.1 <five@example.org>: Recipient address rejected: go away"
    # Nothing after the service in its list: DEFER_IF_PERMIT defers,
    # DEFER_IF_REJECT has nothing to change.
    assert r["dip@example.org"] == \
        "450 4.7.1 <dip@example.org>: Recipient address rejected: Greylisted"
    assert r["dir@example.org"].startswith("250")
    assert r["warn@example.org"].startswith("250") and r["info@example.org"].startswith("250")
    # As postfix: an unknown action is a configuration error.
    assert r["typo@example.org"] == "451 4.3.5 Server configuration error"
    assert r["prepend@example.org"].startswith("250")
    # The service is asked after smx's own restrictions permit: never for a
    # recipient smx does not relay for.
    assert r["elsewhere@other.test"] == "554 5.7.1 <elsewhere@other.test>: Relay access denied"
    assert "elsewhere@other.test" not in [q["recipient"] for _, q in srv.requests]
    assert r["data"].startswith("250")
    wait_until(lambda: sink.count() == 1, 30, "the message at the sink")
    msg = sink.messages()[0]
    # The prepended header is above our Received:.
    assert headers(msg)[:2] == ["X-Policy", "Received"]
    assert b"X-Policy: checked by the test\r\n" in msg["data"]
    assert sorted(msg["rcpts"]) == sorted(["ok@example.org", "dunno@example.org",
                                            "dir@example.org", "warn@example.org",
                                            "info@example.org", "prepend@example.org"])
    log = relay.log_matching(
        r"\w+: reject: RCPT from unknown\[127\.0\.0\.2\]: 450 4\.7\.1 <dip@example\.org>: "
        r"Recipient address rejected: Greylisted; from=<s@sender\.test> to=<dip@example\.org> "
        r"proto=ESMTP helo=<client\.test>",
        r"warn: RCPT from unknown\[127\.0\.0\.2\]: looks odd; from=<s@sender\.test> "
        r"to=<warn@example\.org>",
        r"info: RCPT from unknown\[127\.0\.0\.2\]: noted;",
        r"warning: policy server inet:127\.0\.0\.1:\d+: unknown action \"REJCET\"")
    assert log.count('unknown action "REJCET"') == 1
    wait_until(lambda: relay.stats().get("rejected_5xx_policy_service") == 3, 10,
               "the service's refusals counted: %s" % relay.stats())
    assert relay.stats()["rejected_4xx_policy_service"] == 3

    # HOLD and DISCARD: the message's fate.
    srv.answer = by_recipient({"hold": "HOLD quarantined by policy", "discard": "DISCARD"})
    r = session(relay.port, ["hold@example.org"])
    assert r["data"].startswith("250")
    relay.log_matching(r"hold: RCPT from unknown\[127\.0\.0\.2\]: <hold@example\.org>: "
                       r"Recipient address quarantined by policy")
    q = relay.smx("queue").stdout
    assert "quarantined by policy" in q, q
    r = session(relay.port, ["discard@example.org"])
    assert r["data"].startswith("250")
    relay.log_matching(r": discarded: from=<s@sender\.test>")
    time.sleep(1)
    assert sink.count() == 1


def test_the_request_carries_postfix_attributes_and_one_instance_per_transaction(
        sink, make_relay, policy_server):
    srv = policy_server(by_recipient({}))
    relay = make_relay(sink.port, config(srv.spec))
    session(relay.port, ["a@example.org", "b@example.org"], sender="s@sender.test")
    session(relay.port, ["c@example.org"], sender="")
    reqs = [q for _, q in srv.requests]
    assert [q["recipient"] for q in reqs] == ["a@example.org", "b@example.org", "c@example.org"]
    a, b, c = reqs
    assert a["request"] == "smtpd_access_policy"
    assert a["protocol_state"] == "RCPT" and a["protocol_name"] == "ESMTP"
    assert a["helo_name"] == "client.test"
    assert a["sender"] == "s@sender.test" and c["sender"] == ""
    assert a["client_address"] == "127.0.0.2" and a["client_name"] == "unknown"
    assert a["server_address"] == "127.0.0.1" and a["server_port"] == str(relay.port)
    assert a["recipient_count"] == "0" and b["recipient_count"] == "1"
    assert re.fullmatch(r"[0-9A-Za-z]+", a["queue_id"]) and a["queue_id"] == b["queue_id"]
    assert a["instance"] == b["instance"] != c["instance"]
    for key in ("size", "sasl_username", "ccert_subject", "encryption_protocol", "etrn_domain",
                "stress", "reverse_client_name", "policy_context", "mail_version",
                "compatibility_level", "client_port"):
        assert key in a, key


def test_every_stage_asks_when_configured(sink, make_relay, policy_server):
    def answer(req):
        if req["protocol_state"] == "DATA" and req["sender"] == "nodata@sender.test":
            return "action=REJECT no data today\n\n"
        if req["protocol_state"] == "END-OF-MESSAGE" and req["sender"] == "noend@sender.test":
            return "action=DEFER content later\n\n"
        return "action=DUNNO\n\n"
    srv = policy_server(answer)
    relay = make_relay(sink.port, config(
        srv.spec, 'policy_service_stages = ["connect", "helo", "mail", "rcpt", "data", '
                  '"end_of_data"]\n'))
    r = session(relay.port, ["a@example.org"])
    assert r["data"].startswith("250")
    # (smx run's own probes connect from 127.0.0.1)
    ours = [q for _, q in srv.requests if q["client_address"] == "127.0.0.2"]
    states = [q["protocol_state"] for q in ours]
    assert states == ["CONNECT", "EHLO", "MAIL", "RCPT", "DATA", "END-OF-MESSAGE"]
    end = ours[-1]
    assert int(end["size"]) > len("Subject: policy\r\n\r\nbody\r\n")
    assert end["recipient_count"] == "1"
    r = session(relay.port, ["a@example.org"], sender="nodata@sender.test")
    assert r["354"] == "554 5.7.1 <DATA>: Data command rejected: no data today"
    r = session(relay.port, ["a@example.org"], sender="noend@sender.test")
    assert r["data"] == "450 4.7.1 <END-OF-MESSAGE>: End-of-data rejected: content later"
    wait_until(lambda: sink.count() == 1, 30, "the one message at the sink")


def test_a_prepend_at_end_of_data_is_not_applied_as_in_postfix(sink, make_relay, policy_server):
    # postfix's smtpd_check.c: "action PREPEND must be used before
    # smtpd_end_of_data_restrictions", and the answer counts as DUNNO.
    def answer(req):
        if req["protocol_state"] == "END-OF-MESSAGE":
            return "action=PREPEND X-Late: too late\n\n"
        return "action=PREPEND X-Early: at %s\n\n" % req["protocol_state"]
    srv = policy_server(answer)
    relay = make_relay(sink.port, config(
        srv.spec, 'policy_service_stages = ["rcpt", "end_of_data"]\n'))
    r = session(relay.port, ["a@example.org"])
    assert r["data"].startswith("250"), r
    wait_until(lambda: sink.count() == 1, 30, "the message at the sink")
    msg = sink.messages()[0]
    assert headers(msg)[:2] == ["X-Early", "Received"]
    assert b"X-Late" not in msg["data"]
    relay.log_matching(r"\w+: PREPEND at end_of_data is not applied")


@pytest.mark.parametrize("misbehaviour,error", [
    (None, "read: timeout"),
    ("close", "read: the server closed the connection"),
    ("garbage\n\n", "malformed answer: a line that is no name=value"),
    ("action=REJECT " + "x" * 5000 + "\n\n", "answer longer than 4096 octets"),
])
def test_a_failing_service_gets_the_default_action_logged_once(
        sink, make_relay, policy_server, misbehaviour, error):
    srv = policy_server(by_recipient({"bad": misbehaviour}))
    relay = make_relay(sink.port, config(
        srv.spec, 'policy_service_timeout = "1s"\npolicy_service_try_limit = 2\n'
                  'policy_service_retry_delay = "500ms"\n'))
    r = session(relay.port, ["bad@example.org", "good@example.org"])
    assert r["bad@example.org"] == "451 4.3.5 <bad@example.org>: Recipient address rejected: " \
                                   "Server configuration problem"
    assert r["good@example.org"].startswith("250") and r["data"].startswith("250")
    # Two attempts at the bad one, then the good one answered.
    assert [q["recipient"] for _, q in srv.requests] == \
        ["bad@example.org", "bad@example.org", "good@example.org"]
    # The second attempt waited retry_delay (and, for the silent service,
    # the timeout) after the first: 1.5 s and 0.5 s, less the moment the
    # first request took to arrive after smx started its clock.
    assert srv.times[1] - srv.times[0] >= (1.25 if misbehaviour is None else 0.4)
    log = relay.log_matching(r"warning: problem talking to policy server %s: %s \(2 attempts\)"
                             % (re.escape(srv.spec), re.escape(error)))
    assert log.count("problem talking to policy server") == 1
    wait_until(lambda: relay.stats().get("rejected_4xx_policy_service_failure") == 1, 10,
               "the failure counted: %s" % relay.stats())


def test_a_service_that_is_down_gets_the_configured_default_action(sink, make_relay):
    port = free_port()  # nothing listens there
    relay = make_relay(sink.port, config(
        "inet:127.0.0.1:%d" % port, 'policy_service_try_limit = 1\n'
                                     'policy_service_default_action = "DUNNO"\n'))
    r = session(relay.port, ["a@example.org"])
    assert r["a@example.org"].startswith("250") and r["data"].startswith("250")
    relay.log_matching(r"warning: problem talking to policy server inet:127\.0\.0\.1:%d: "
                       r"connect: Connection refused \(1 attempt\)" % port)
    wait_until(lambda: sink.count() == 1, 30, "the message at the sink")


def test_a_unix_socket_service(sink, make_relay, tmp_path):
    path = str(tmp_path / "policy.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(4)
    seen = []

    def serve():
        conn, _ = listener.accept()
        with conn:
            data = b""
            while b"\n\n" not in data:
                data += conn.recv(4096)
            seen.append(data)
            conn.sendall(b"action=REJECT unix says no\n\n")
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    relay = make_relay(sink.port, config("unix:" + path))
    r = session(relay.port, ["a@example.org"])
    assert r["a@example.org"] == "554 5.7.1 <a@example.org>: Recipient address rejected: unix says no"
    assert b"recipient=a@example.org\n" in seen[0]
    listener.close()


def test_connections_are_reused_within_request_limit_and_max_idle(sink, make_relay,
                                                                  policy_server):
    srv = policy_server(by_recipient({}))
    relay = make_relay(sink.port, config(
        srv.spec, 'policy_service_request_limit = 3\npolicy_service_max_idle = "2s"\n'))
    # Two sessions, five requests: one connection for three, then a new one.
    session(relay.port, ["a@example.org", "b@example.org"])
    session(relay.port, ["c@example.org", "d@example.org", "e@example.org"])
    assert [n for n, _ in srv.requests] == [1, 1, 1, 2, 2]
    wait_until(lambda: 1 in srv.closed, 10, "the first connection closed at its request limit")
    assert 2 not in srv.closed
    # Idle past max_idle: closed by smx; the next request makes a new one.
    wait_until(lambda: 2 in srv.closed, 10, "the idle connection closed")
    session(relay.port, ["f@example.org"])
    assert srv.requests[-1][0] == 3


def test_a_connection_is_not_used_past_max_ttl(sink, make_relay, policy_server):
    srv = policy_server(by_recipient({}))
    relay = make_relay(sink.port, config(srv.spec, 'policy_service_max_ttl = "1s"\n'))
    session(relay.port, ["a@example.org"])
    # Closed at its max_ttl although max_idle (300s) is far.
    wait_until(lambda: 1 in srv.closed, 10, "the connection closed at max_ttl")
    session(relay.port, ["b@example.org"])
    assert [n for n, _ in srv.requests] == [1, 2]


def test_a_service_that_closes_after_each_answer_costs_no_attempt(sink, make_relay,
                                                                   policy_server):
    # Each connection answers once, then the service closes it (as postgrey
    # --exim does): the kept connection is found closed and replaced without
    # counting an attempt (try_limit 1 would otherwise give the default).
    srv = policy_server(by_recipient({}))
    srv.close_after_answer = True
    relay = make_relay(sink.port, config(srv.spec, 'policy_service_try_limit = 1\n'))
    rcpts = ["a@example.org", "b@example.org", "c@example.org"]
    r = session(relay.port, rcpts)
    assert all(r[x].startswith("250") for x in rcpts), r
    assert [n for n, _ in srv.requests] == [1, 2, 3]
    assert "problem talking to policy server" not in relay.log_text()


def test_prepend_is_bounded_in_number_and_size(sink, make_relay, policy_server):
    def answer(req):
        local = req["recipient"].split("@")[0]
        if local == "nocolon":
            return "action=PREPEND no colon here\n\n"
        if local == "long":
            return "action=PREPEND X-Long: " + "y" * 1000 + "\n\n"
        return "action=PREPEND X-%s: yes\n\n" % local
    srv = policy_server(answer)
    relay = make_relay(sink.port, config(srv.spec))
    rcpts = ["nocolon@example.org", "long@example.org"] + ["n%d@example.org" % i for i in range(25)]
    r = session(relay.port, rcpts)
    assert all(r[x].startswith("250") for x in rcpts) and r["data"].startswith("250")
    wait_until(lambda: sink.count() == 1, 30, "the message at the sink")
    names = headers(sink.messages()[0])
    # The first 20 valid ones, in order, then our Received:.
    assert names[:21] == ["X-n%d" % i for i in range(20)] + ["Received"], names
    relay.log_matching(r"warning: policy server inet:\S+: PREPEND skipped: \"no colon here\" "
                       r"is no header field of at most 998 octets",
                       r"warning: policy server inet:\S+: PREPEND skipped: \"X-Long: y+\" is no",
                       r"warning: policy server inet:\S+: PREPEND skipped: the message has 20 "
                       r"prepended headers already")


def test_without_limits_one_connection_serves_many_sessions(sink, make_relay, policy_server):
    srv = policy_server(by_recipient({}))
    relay = make_relay(sink.port, config(srv.spec))
    for i in range(5):
        session(relay.port, ["a%d@example.org" % i, "b%d@example.org" % i])
    assert len(srv.requests) == 10 and srv.connections == 1


def test_a_config_reload_changes_the_service(sink, make_relay, policy_server):
    from test_reload import reload as smx_reload
    first = policy_server(by_recipient({}, default="action=REJECT first\n\n"))
    second = policy_server(by_recipient({}, default="action=REJECT second\n\n"))
    relay = make_relay(sink.port, config(first.spec))
    assert session(relay.port, ["a@example.org"])["a@example.org"].endswith("first")
    with open(relay.config) as f:
        text = f.read()
    with open(relay.config, "w") as f:
        f.write(text.replace(first.spec, second.spec))
    smx_reload(relay)
    wait_until(lambda: session(relay.port, ["a@example.org"])["a@example.org"].endswith("second"),
               10, "the reloaded service")


# The real services (Debian packages) --------------------------------------

POSTGREY = "/usr/sbin/postgrey"
POLICYD_SPF = "/usr/bin/policyd-spf"


def listening(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


@pytest.fixture
def postgrey(tmp_path):
    if not os.path.exists(POSTGREY):
        pytest.skip("postgrey is not installed (scripts/test installs it)")
    port = free_port()
    db = tmp_path / "postgrey"
    db.mkdir()
    proc = subprocess.Popen(
        [POSTGREY, "--inet=127.0.0.1:%d" % port, "--dbdir=%s" % db, "--delay=2",
         "--max-age=1", "--user=root", "--group=root", "--hostname=greylist.test",
         "--whitelist-clients=/dev/null", "--whitelist-recipients=/dev/null",
         "--auto-whitelist-clients=0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: proc.poll() is not None or listening(port), 20, "postgrey to listen")
        if proc.poll() is not None:
            raise AssertionError("postgrey exited: %s" % proc.stderr.read().decode())
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def test_postgrey_greylists_the_first_attempt_and_takes_the_retry(sink, make_relay, postgrey):
    relay = make_relay(sink.port, config("inet:127.0.0.1:%d" % postgrey))
    first = session(relay.port, ["user@example.org"], sender="s@sender.test")
    assert re.fullmatch(r"450 4\.\d\.\d <user@example\.org>: Recipient address rejected: "
                        r"Greylisted.*", first["user@example.org"]), first
    relay.log_matching(r"\w+: reject: RCPT from unknown\[127\.0\.0\.2\]: 450 4\.\d\.\d "
                       r"<user@example\.org>: Recipient address rejected: Greylisted.*; "
                       r"from=<s@sender\.test> to=<user@example\.org> proto=ESMTP "
                       r"helo=<client\.test>")
    time.sleep(3)  # past --delay=2
    retry = session(relay.port, ["user@example.org"], sender="s@sender.test")
    assert retry["user@example.org"].startswith("250") and retry["data"].startswith("250"), retry
    wait_until(lambda: sink.count() == 1, 30, "the retried message at the sink")
    msg = sink.messages()[0]
    # postgrey says how long the triplet was delayed, above our Received:.
    assert headers(msg)[:2] == ["X-Greylist", "Received"], headers(msg)
    assert re.search(rb"X-Greylist: delayed \d+ seconds by postgrey", msg["data"])


SPF_CONF = """debugLevel = 1
TestOnly = 1
HELO_reject = Fail
Mail_From_reject = Fail
PermError_reject = False
TempError_Defer = False
skip_addresses = 192.0.2.0/24
"""

# policyd-spf asks DNS through dnspython's default resolver: pointed at the
# test's server, so that /etc/resolv.conf stays as it is.
SPF_PRELUDE = """
import runpy, sys
import dns.resolver
r = dns.resolver.Resolver(configure=False)
r.nameservers = ["127.0.0.1"]
r.port = int(sys.argv[1])
r.timeout = r.lifetime = 5
dns.resolver.default_resolver = r
sys.argv = ["policyd-spf", sys.argv[2]]
runpy.run_path("/usr/bin/policyd-spf", run_name="__main__")
"""


@pytest.fixture
def policyd_spf(tmp_path):
    """policyd-spf as postfix's spawn(8) runs it: one process per connection,
    the connection its stdin and stdout."""
    if not os.path.exists(POLICYD_SPF):
        pytest.skip("postfix-policyd-spf-python is not installed (scripts/test installs it)")
    conf = tmp_path / "policyd-spf.conf"
    conf.write_text(SPF_CONF)
    zone = {"pass.test": {"TXT": ["v=spf1 ip4:127.0.0.2 -all"]},
            "fail.test": {"TXT": ["v=spf1 -all"]}}
    dns = DnsServer(zone)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    procs = []

    def spawn():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                procs.append(subprocess.Popen(
                    ["/usr/bin/python3", "-c", SPF_PRELUDE, str(dns.port), str(conf)],
                    stdin=conn.fileno(), stdout=conn.fileno(), stderr=subprocess.DEVNULL))
    threading.Thread(target=spawn, daemon=True).start()
    yield listener.getsockname()[1]
    listener.close()
    for p in procs:
        p.terminate()
        p.wait(10)
    dns.stop()


def test_policyd_spf_rejects_a_fail_and_stamps_a_pass(sink, make_relay, policyd_spf):
    relay = make_relay(sink.port, config("inet:127.0.0.1:%d" % policyd_spf))
    r = session(relay.port, ["user@example.org"], sender="someone@fail.test")
    assert re.fullmatch(r"550 5\.7\.23 <user@example\.org>: Recipient address rejected: "
                        r"Message rejected due to: SPF fail - not authorized\..*",
                        r["user@example.org"]), r
    relay.log_matching(r"\w+: reject: RCPT from unknown\[127\.0\.0\.2\]: 550 5\.7\.23 "
                       r".*from=<someone@fail\.test> to=<user@example\.org>")
    r = session(relay.port, ["user@example.org"], sender="someone@pass.test")
    assert r["user@example.org"].startswith("250") and r["data"].startswith("250"), r
    wait_until(lambda: sink.count() == 1, 30, "the message at the sink")
    msg = sink.messages()[0]
    assert headers(msg)[:2] == ["Received-SPF", "Received"], headers(msg)
    assert re.search(rb"Received-SPF: Pass \(mailfrom\) identity=mailfrom; client-ip=127\.0\.0\.2",
                     msg["data"]), msg["data"][:400]
