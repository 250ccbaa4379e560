"""Which DNS failures bounce and which wait (issue 25), against a scripted
name server on 127.0.0.1 (tests/integration/dns_server.py) that fails names
on demand. As postfix's smtp_addr.c: a temporary failure outranks every
permanent one, a backup MX whose better hosts all fail waits (4.4.4), and
only a definite answer bounces. smx runs without [routes] (every domain by
its MX), [client] dns_servers pointing at the scripted server; it is
smx.test and listens on 127.0.0.1."""
import json
import re

import pytest

from conftest import free_port, send, wait_until
from dns_server import DnsServer

# Deferred mail stays deferred while the test looks at it.
FAR = "[queue]\nretry_min = 3600\nretry_max = 7200\n"

ZONE = {
    # Hosts: one that fails, two that do not exist, one where nothing
    # listens, and us (by address; smx.test is us by name).
    "servfail.host.test": "SERVFAIL",
    "down.host.test": {"A": ["127.0.0.5"]},
    "me.host.test": {"A": ["127.0.0.1"]},
    "other.host.test": {"A": ["127.0.0.6"]},
    # Domains.
    "sfnx.test": {"MX": [(10, "servfail.host.test"), (20, "nx.host.test")]},
    "nxsf.test": {"MX": [(10, "nx.host.test"), (20, "servfail.host.test")]},
    "backup-sf.test": {"MX": [(10, "servfail.host.test"), (20, "smx.test")]},
    "backup-nx.test": {"MX": [(10, "nx.host.test"), (20, "me.host.test")]},
    "backup-down.test": {"MX": [(10, "down.host.test"), (20, "me.host.test")]},
    "mx-servfail.test": "SERVFAIL",
    "best.test": {"MX": [(10, "me.host.test"), (20, "other.host.test")]},
    # nx.test: not in the zone (NXDOMAIN).
}


@pytest.fixture
def relay(make_relay):
    with DnsServer(ZONE) as dns:
        # Nothing listens on this port on 127.0.0.5: down.host.test refuses.
        yield make_relay(0, FAR + '[client]\ndns_servers = ["127.0.0.1:%d"]\nsmtp_port = %d\n'
                                  % (dns.port, free_port()), routes=False)


def status_line(relay, rcpt, status):
    pat = re.compile(r"to=<%s>.*status=%s .*" % (re.escape(rcpt), status))
    return wait_until(lambda: pat.search(relay.log_text()), 30,
                      "%s for %s" % (status, rcpt)).group(0)


def queue_replies(relay):
    """{recipient: (state, delay_reason)} of `smx queue --json`."""
    lines = relay.smx("queue", "--json").stdout.splitlines()
    return {r["address"]: (r["state"], r.get("delay_reason"))
            for m in map(json.loads, lines) for r in m["recipients"]}


# (recipient, the reply it waits with)
DEFERRED = [
    ("u@sfnx.test", "451 4.4.3 Temporary failure: name service error for "
                    "name=servfail.host.test type=A"),
    ("u@nxsf.test", "451 4.4.3 Temporary failure: name service error for "
                    "name=servfail.host.test type=A"),
    ("u@backup-sf.test", "451 4.4.4 unable to find primary relay for backup-sf.test"),
    ("u@backup-nx.test", "451 4.4.4 unable to find primary relay for backup-nx.test"),
    # The primary resolves but refuses: a connection failure, as postfix.
    ("u@backup-down.test", "451 4.4.1 connect to down.host.test[127.0.0.5]:"),
    ("u@mx-servfail.test", "451 4.4.3 Temporary failure: name service error for "
                           "name=mx-servfail.test type=MX"),
]


def test_temporary_dns_failures_and_a_backup_mx_defer(relay):
    for rcpt, _ in DEFERRED:
        send(relay.port, "s@client.test", [rcpt], b"Subject: dns\r\n\r\nbody\r\n")
    for rcpt, reply in DEFERRED:
        assert reply.split(" ", 1)[1] in status_line(relay, rcpt, "deferred")

    def all_deferred():
        q = queue_replies(relay)
        return q if len(q) == len(DEFERRED) and all(
            s == "deferred" for s, _ in q.values()) else None
    q = wait_until(all_deferred, 30, "every recipient deferred in smx queue")
    for rcpt, reply in DEFERRED:
        assert q[rcpt][1].startswith(reply), (rcpt, q[rcpt])
    log = relay.log_text()
    assert "status=bounced" not in log and "loops back to myself" not in log
    assert relay.stats()["bounced"] == 0


def test_definite_answers_bounce(relay):
    send(relay.port, "s@client.test", ["u@nx.test", "v@best.test"], b"Subject: dns\r\n\r\nbody\r\n")
    line = status_line(relay, "u@nx.test", "bounced")
    assert "550 5.1.2" in line and "name=nx.test" in line, line
    line = status_line(relay, "v@best.test", "bounced")
    assert "554 5.4.6 mail for best.test loops back to myself" in line, line
    # Nothing of the message is left to try (the DSN to client.test, which
    # does not exist either, bounces as well: a double bounce is dropped).
    wait_until(lambda: not any(a in queue_replies(relay) for a in ("u@nx.test", "v@best.test")),
               30, "the bounced recipients to leave the queue")
