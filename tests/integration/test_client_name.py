"""Client names (issue 28, item 7): the PTR of the client's address,
confirmed by the addresses of that name, as postfix does, under
policy.client_name_timeout, from a scripted name server
(tests/integration/dns_server.py) given as [client] dns_servers. The name
shows in the log lines, the Received: header and the queue file, or
unknown; reject_unknown_client_hostname refuses clients without one, at RCPT
(delay_reject) or at connect. relay_networks is 127.0.0.1 alone: the clients
bound to 127.0.0.2-4 are outsiders."""
import json
import time

import pytest

from conftest import strip_received, wait_until
from dns_server import DnsServer
from test_dnsbl import Client

ZONE = {
    # Confirmed: the name leads back to the address.
    "2.0.0.127.in-addr.arpa": {"PTR": ["Good.Client.Test"]},
    "good.client.test": {"A": ["127.0.0.2"]},
    # Not confirmed: the name has another address.
    "3.0.0.127.in-addr.arpa": {"PTR": ["liar.client.test"]},
    "liar.client.test": {"A": ["127.0.0.9"]},
    # Never answered.
    "4.0.0.127.in-addr.arpa": "DROP",
    # A PTR that is no host name.
    "5.0.0.127.in-addr.arpa": {"PTR": ["bad]name.test"]},
}


@pytest.fixture
def dns():
    with DnsServer(ZONE) as d:
        yield d


def relay_with(make_relay, sink, dns, policy=""):
    return make_relay(sink.port, '[server]\nrelay_networks = ["127.0.0.1/32"]\n'
                      'relay_domains = ["example.test"]\nthreads = 1\nprocesses = 1\n'
                      '[client]\ndns_servers = ["127.0.0.1:%d"]\n[policy]\n'
                      'client_name_timeout = "1s"\n%s' % (dns.port, policy))


def test_a_confirmed_name_in_the_logs_the_received_header_and_the_queue(dns, make_relay, sink):
    relay = relay_with(make_relay, sink, dns)
    c = Client(relay.port, "127.0.0.2")
    assert c.send_mail().startswith("250 ")
    c.close()
    wait_until(lambda: sink.count() == 1, 20, "the message at the sink")
    _, received = strip_received(sink.messages()[0]["data"])
    assert received.startswith(b"Received: from client.test (good.client.test [127.0.0.2])")
    log = wait_until(lambda: "disconnect from good.client.test[127.0.0.2]" in relay.log_text()
                     and relay.log_text(), 10, "the session's end")
    assert "connect from good.client.test[127.0.0.2]" in log
    assert ": client=good.client.test[127.0.0.2]" in log

    # Cached: a second session asks the name server nothing.
    asked = len(dns.queries)
    c = Client(relay.port, "127.0.0.2")
    assert c.cmd("QUIT").startswith("221")
    c.close()
    assert len(dns.queries) == asked


def test_unconfirmed_timed_out_and_bad_names_are_unknown(dns, make_relay, sink):
    relay = relay_with(make_relay, sink, dns)
    for ip in ("127.0.0.3", "127.0.0.4", "127.0.0.5"):
        c = Client(relay.port, ip)
        assert c.greeting.startswith("220 ")
        if ip == "127.0.0.4":
            assert 0.9 <= c.greeted_after < 3.5, c.greeted_after  # client_name_timeout
        assert c.send_mail().startswith("250 ")
        c.close()
    wait_until(lambda: sink.count() == 3, 20, "the messages at the sink")
    received = sorted(strip_received(m["data"])[1] for m in sink.messages())
    assert [r.split(b")")[0] for r in received] == [
        b"Received: from client.test (unknown [127.0.0.3]",
        b"Received: from client.test (unknown [127.0.0.4]",
        b"Received: from client.test (unknown [127.0.0.5]"]
    log = wait_until(lambda: "disconnect from unknown[127.0.0.5]" in relay.log_text()
                     and relay.log_text(), 10, "the last session's end")
    assert "hostname liar.client.test does not resolve to address 127.0.0.3" in log
    assert "hostname lookup of 127.0.0.4: " in log
    for ip in ("127.0.0.3", "127.0.0.4", "127.0.0.5"):
        assert "connect from unknown[%s]" % ip in log
    assert "bad]name" not in log


def test_lookups_off_means_unknown(dns, make_relay, sink):
    relay = relay_with(make_relay, sink, dns, "client_name_lookup = false")
    c = Client(relay.port, "127.0.0.2")
    assert c.cmd("QUIT").startswith("221")
    c.close()
    wait_until(lambda: "disconnect from unknown[127.0.0.2]" in relay.log_text(), 10,
               "the session's end")
    assert dns.queries == []


def test_reject_unknown_client_hostname_at_rcpt(dns, make_relay, sink):
    relay = relay_with(make_relay, sink, dns, "reject_unknown_client_hostname = true")
    c = Client(relay.port, "127.0.0.3")
    assert c.send_mail() == ("550 5.7.25 Client host rejected: cannot find your hostname, "
                             "[127.0.0.3]")
    c.close()
    c = Client(relay.port, "127.0.0.4")  # timed out: for now
    assert c.send_mail() == ("450 4.7.25 Client host rejected: cannot find your hostname, "
                             "[127.0.0.4]")
    c.close()
    c = Client(relay.port, "127.0.0.2")
    assert c.send_mail().startswith("250 ")
    c.close()
    log = wait_until(lambda: "disconnect from good.client.test[127.0.0.2]" in relay.log_text()
                     and relay.log_text(), 10, "the last session's end")
    assert ("NOQUEUE: reject: RCPT from unknown[127.0.0.3]: 550 5.7.25 Client host rejected: "
            "cannot find your hostname, [127.0.0.3]; from=<s@client.test> to=<u@example.test> "
            "proto=ESMTP helo=<client.test>") in log


def test_reject_unknown_client_hostname_at_connect(dns, make_relay, sink):
    relay = relay_with(make_relay, sink, dns,
                       "reject_unknown_client_hostname = true\ndelay_reject = false")
    c = Client(relay.port, "127.0.0.3")
    assert c.greeting.startswith("220 ")
    assert c.cmd("EHLO client.test").startswith("550 5.7.25 Client host rejected")
    assert c.cmd("QUIT").startswith("221")
    c.close()
