"""DSN parameters and SMTPUTF8 survive smx -> postfix -> sink over TLS.

A private postfix instance (its own config, queue and data directories, a high
port on 127.0.0.1, stopped by its master's PID, as perf/peers/postfix.sh runs
one) is smx's next hop. It REQUIRES TLS (smtpd_tls_security_level = encrypt,
with a certificate this test makes with openssl), offers DSN and SMTPUTF8, and
relays on to the scripted sink, which offers DSN and SMTPUTF8 too and records
the MAIL and RCPT parameters it gets."""
import os
import shutil
import signal
import smtplib
import subprocess
import tempfile
import time

import pytest

from conftest import free_port, wait_until
from postfix_auth_peer import MASTER_CF

pytestmark = pytest.mark.skipif(
    not shutil.which("postfix") or not shutil.which("openssl") or os.geteuid() != 0,
    reason="needs the postfix and openssl packages and root (postfix's own users)")

MAIN_CF = """compatibility_level = 3.6
config_directory = {d}/etc
queue_directory = {d}/spool
data_directory = {d}/data
mail_owner = postfix
setgid_group = postdrop
inet_interfaces = 127.0.0.1
inet_protocols = ipv4
myhostname = postfix-nexthop.test
mydestination =
local_recipient_maps =
alias_maps =
alias_database =
mynetworks = 127.0.0.0/8
smtpd_relay_restrictions = permit_mynetworks, reject_unauth_destination
relayhost = [127.0.0.1]:{sink}
smtputf8_enable = yes
smtpd_tls_security_level = encrypt
smtpd_tls_cert_file = {d}/cert.pem
smtpd_tls_key_file = {d}/key.pem
smtpd_tls_received_header = yes
maillog_file_prefixes = {d}
maillog_file = {d}/maillog
"""



class Postfix:
    def __init__(self, sink_port):
        # Under /tmp, not pytest's 0700 directories: postfix's daemons drop
        # to the postfix user and must reach their queue.
        self.dir = tempfile.mkdtemp(prefix="smx-dsn-postfix-", dir="/tmp")
        os.chmod(self.dir, 0o755)
        self.port = free_port()
        self.pid_file = os.path.join(self.dir, "spool", "pid", "master.pid")
        try:
            self.start(sink_port)
        except BaseException:
            self.stop()  # whatever started, stopped by its PID; the directory goes
            raise

    def start(self, sink_port):
        for sub in ("etc", "spool", "data"):
            os.makedirs(os.path.join(self.dir, sub))
        shutil.chown(os.path.join(self.dir, "data"), "postfix")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-subj", "/CN=postfix-nexthop.test",
                        "-keyout", os.path.join(self.dir, "key.pem"),
                        "-out", os.path.join(self.dir, "cert.pem")],
                       check=True, capture_output=True, timeout=60)
        with open(os.path.join(self.dir, "etc", "main.cf"), "w") as f:
            f.write(MAIN_CF.format(d=self.dir, sink=sink_port))
        with open(os.path.join(self.dir, "etc", "master.cf"), "w") as f:
            f.write(MASTER_CF.format(port=self.port))
        etc = os.path.join(self.dir, "etc")
        subprocess.run(["postfix", "-c", etc, "set-permissions"], capture_output=True, timeout=60)
        subprocess.run(["postfix", "-c", etc, "check"], check=True, capture_output=True, timeout=60)
        subprocess.run(["postfix", "-c", etc, "start"], check=True, capture_output=True, timeout=60)
        wait_until(self.pid, 20, "postfix's master.pid")
        wait_until(self.greets, 20, "postfix to answer")

    def pid(self):
        try:
            with open(self.pid_file) as f:
                return int(f.readline().strip() or 0)
        except (OSError, ValueError):
            return 0

    def greets(self):
        try:
            with smtplib.SMTP("127.0.0.1", self.port, timeout=5) as c:
                return c.ehlo()[0] == 250
        except OSError:
            return False

    def log(self):
        try:
            with open(os.path.join(self.dir, "maillog"), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stop(self):
        pid = self.pid()
        if pid:
            os.kill(pid, signal.SIGTERM)
            for _ in range(100):
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
        shutil.rmtree(self.dir, ignore_errors=True)


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
