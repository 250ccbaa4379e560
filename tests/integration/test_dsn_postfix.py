"""DSN parameters and SMTPUTF8 survive smx -> postfix -> sink over TLS.

A private postfix instance (its own config, queue and data directories, a high
port on 127.0.0.1, stopped by its master's PID, as perf/peers/postfix.sh runs
one) is smx's next hop. It REQUIRES TLS (smtpd_tls_security_level = encrypt,
with a certificate this test makes with openssl), offers DSN and SMTPUTF8, and
relays on to the scripted sink, which offers DSN and SMTPUTF8 too and records
the MAIL and RCPT parameters it gets."""
import os
import shutil
import smtplib

import pytest

from conftest import free_port, wait_until
from postfix_peer import RELAY_TO_SINK_CF, PrivatePostfix

pytestmark = pytest.mark.skipif(
    not shutil.which("postfix") or not shutil.which("openssl") or os.geteuid() != 0,
    reason="needs the postfix and openssl packages and root (postfix's own users)")

# After postfix_peer's common lines: relays for 127.0.0.0/8 to the sink,
# requires TLS, offers SMTPUTF8 (and DSN, postfix's default).
MAIN_CF = "myhostname = postfix-nexthop.test\n" + RELAY_TO_SINK_CF + """\
smtputf8_enable = yes
smtpd_tls_security_level = encrypt
smtpd_tls_cert_file = {{dir}}/cert.pem
smtpd_tls_key_file = {{dir}}/key.pem
smtpd_tls_received_header = yes
"""


class Postfix(PrivatePostfix):
    def __init__(self, sink_port):
        super().__init__(free_port(), "nexthop", MAIN_CF.format(sink=sink_port))


@pytest.fixture
def postfix_to(make_sink):
    made = []

    def make():
        sink = make_sink("--dsn", "--smtputf8")
        p = Postfix(sink.port)
        made.append(p)
        return p, sink
    yield make
    for p in made:
        p.stop()


def test_postfix_requires_tls(postfix_to):
    p, _ = postfix_to()
    with smtplib.SMTP("127.0.0.1", p.port, timeout=30) as c:
        c.ehlo("client.test")
        assert c.has_extn("starttls") and c.has_extn("dsn") and c.has_extn("smtputf8")
        code, _ = c.mail("s@client.test")
        assert code == 530, "postfix must refuse mail before STARTTLS"


def test_dsn_parameters_and_smtputf8_survive_postfix_over_tls(postfix_to, make_relay):
    p, sink = postfix_to()
    relay = make_relay(p.port)
    rcpt = "jösé@exämple.net"
    with smtplib.SMTP("127.0.0.1", relay.port, timeout=30) as c:
        c.ehlo("client.test")
        c.sendmail("sëndér@client.test", ["bob@example.net", rcpt],
                   "Subject: grüße\r\n\r\nbody\r\n".encode(),
                   mail_options=["SMTPUTF8", "RET=HDRS", "ENVID=QQ+2B314"],
                   rcpt_options=["NOTIFY=SUCCESS,FAILURE", "ORCPT=rfc822;orig+2Bbob@example.org"])
    wait_until(lambda: sink.count() >= 1, 60, "the message through postfix\n" + p.log())
    m = [x for x in sink.messages() if x["from"]][0]
    wire = lambda a: a.encode("utf-8").decode("latin-1")
    assert m["from"] == wire("sëndér@client.test")
    assert sorted(m["rcpts"]) == sorted(["bob@example.net", wire(rcpt)])
    mail = m["params"].split()
    assert "SMTPUTF8" in mail and "RET=HDRS" in mail and "ENVID=QQ+2B314" in mail, mail
    for params in m["rcpt_params"]:
        assert "NOTIFY=SUCCESS,FAILURE" in params.split(), m["rcpt_params"]
        assert "ORCPT=rfc822;orig+2Bbob@example.org" in params.split(), m["rcpt_params"]
    # smx spoke TLS to postfix (postfix records it in its Received: field).
    assert b"using TLS" in m["data"], m["data"][:800]
    # postfix took the NOTIFY on: smx sends no success notice itself.
    assert "relayed" not in relay.log_text()
    assert all(x["from"] != "" for x in sink.messages())
