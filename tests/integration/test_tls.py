"""STARTTLS (RFC 3207) in SMTPS, checked with real clients: swaks, Python's
smtplib and ssl, openssl s_client and testssl.sh; and in SMTPC, against the
TLS-capable sink. Certificates are made here."""
import re
import os
import shutil
import smtplib
import socket
import ssl
import subprocess
import time

import pytest

from conftest import SMX, Raw, Relay, local_client, send, wait_until


def make_cert(directory, name, cn="smx.test"):
    cert = os.path.join(directory, name + ".crt")
    key = os.path.join(directory, name + ".key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=" + cn, "-addext", "subjectAltName=DNS:%s,IP:127.0.0.1" % cn,
                    "-keyout", key, "-out", cert],
                   check=True, capture_output=True, timeout=60)
    return cert, key


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("certs"))
    return {"server": make_cert(d, "server"), "other": make_cert(d, "other")}


def in_log(relay, text):
    """Waits for text in the log (info lines are flushed once a second)."""
    wait_until(lambda: text in relay.log_text(), 5, repr(text) + " in the log")


def tls_extra(certs, level=None, more=""):
    cert, key = certs["server"]
    text = '[server]\ntls_cert = "%s"\ntls_key = "%s"\n' % (cert, key)
    if level:
        text += 'tls_security_level = "%s"\n' % level
    return text + more


@pytest.fixture
def tls_relay(sink, make_relay, certs):
    return make_relay(sink.port, tls_extra(certs))


def client_context():
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


# One context for all raw connections: a session resumes only in the context
# it came from.
CLIENT_CONTEXT = client_context()


class Conn(Raw):
    """Raw, and it can switch to TLS."""

    def start_tls(self, session=None):
        assert self.buf == b"", self.buf
        self.s = CLIENT_CONTEXT.wrap_socket(self.s, session=session)

    def closed_within(self, seconds):
        """True when the server closes the connection within `seconds`."""
        self.s.settimeout(seconds)
        try:
            while self.s.recv(4096):
                pass
            return True
        except (socket.timeout, TimeoutError):
            return False
        except (ConnectionResetError, ssl.SSLError):
            return True


def test_swaks_tls_message_arrives_with_tls_in_received(tls_relay, sink):
    r = subprocess.run(["swaks", "--server", "127.0.0.1", "--port", str(tls_relay.port),
                        "--tls", "--helo", "client.test", "--from", "a@client.test",
                        "--to", "b@example.org", "--body", "over TLS"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "TLS started" in r.stdout, r.stdout
    wait_until(lambda: sink.count() == 1, 30, "the message at the sink")
    m = sink.messages()[0]
    assert m["rcpts"] == ["b@example.org"]
    received = m["data"].split(b"\r\n\r\n")[0].decode()
    assert "\tby smx.test (smx) with ESMTPS id " in received, received
    assert "(using TLSv1.3 with cipher TLS_" in received, received
    assert "bits))" in received, received
    in_log(tls_relay, "Anonymous TLS connection established from %s: TLSv1.3" % local_client())


def test_smtplib_starttls_restarts_the_session(tls_relay, sink):
    with smtplib.SMTP("127.0.0.1", tls_relay.port, timeout=30) as c:
        c.ehlo("client.test")
        assert c.has_extn("starttls")
        assert c.docmd("STARTTLS", "now")[0] == 501
        c.docmd("MAIL", "FROM:<a@client.test>")
        code, _ = c.starttls(context=client_context())
        assert code == 220
        # Nothing of before STARTTLS is left: EHLO again, no transaction.
        assert c.docmd("RCPT", "TO:<b@example.org>")[0] == 503
        assert c.docmd("MAIL", "FROM:<a@client.test>")[0] == 503
        c.ehlo("client.test")
        assert not c.has_extn("starttls")
        assert c.has_extn("pipelining")
        assert c.docmd("STARTTLS")[0] == 503
        c.sendmail("a@client.test", ["b@example.org"], b"Subject: t\r\n\r\nbody\r\n")
    wait_until(lambda: sink.count() == 1, 30, "the message at the sink")
    assert b"with ESMTPS" in sink.messages()[0]["data"]


def test_no_certificate_no_starttls(sink, make_relay):
    c = Conn(make_relay(sink.port).port)
    assert "STARTTLS" not in c.cmd("EHLO client.test")
    assert c.cmd("STARTTLS").startswith("502 ")
    c.close()


def test_level_none_with_a_certificate_offers_nothing(sink, make_relay, certs):
    r = make_relay(sink.port, tls_extra(certs, "none"))
    c = Conn(r.port)
    assert "STARTTLS" not in c.cmd("EHLO client.test")
    c.close()


def test_encrypt_refuses_mail_before_starttls(sink, make_relay, certs):
    r = make_relay(sink.port, tls_extra(certs, "encrypt"))
    c = Conn(r.port)
    assert "250-STARTTLS" in c.cmd("EHLO client.test")
    for cmd in ("MAIL FROM:<a@client.test>", "RCPT TO:<b@example.org>", "DATA"):
        assert c.cmd(cmd).startswith("530 5.7.0 Must issue a STARTTLS command first"), cmd
    assert c.cmd("STARTTLS").startswith("220 ")
    c.start_tls()
    assert c.cmd("EHLO client.test").startswith("250-smx.test")
    assert c.cmd("MAIL FROM:<a@client.test>").startswith("250 ")
    assert c.cmd("RCPT TO:<b@example.org>").startswith("250 ")
    assert c.cmd("DATA").startswith("354 ")
    assert c.cmd("Subject: x\r\n\r\nbody\r\n.").startswith("250 ")
    c.cmd("QUIT")
    c.close()


def test_plaintext_injected_after_starttls_is_discarded(tls_relay):
    """CVE-2011-0411: a command sent in the same packet as STARTTLS must not
    be executed inside the TLS session."""
    c = Conn(tls_relay.port)
    c.cmd("EHLO client.test")
    c.s.sendall(b"STARTTLS\r\nRSET\r\n")
    assert c.reply().startswith("220 ")
    c.start_tls()
    # The first reply in TLS must be the EHLO's, with no 250 for RSET before it.
    assert c.cmd("EHLO client.test").startswith("250-smx.test")
    assert c.cmd("NOOP").startswith("250 ")
    assert c.cmd("QUIT").startswith("221 ")
    c.close()
    in_log(tls_relay, "discarding 6 bytes of input pipelined after STARTTLS")


def test_handshake_that_never_completes_is_cut(sink, make_relay, certs):
    r = make_relay(sink.port, tls_extra(certs, more="command_timeout = 2\n"))
    c = Conn(r.port)
    assert c.cmd("STARTTLS").startswith("220 ")
    t0 = time.monotonic()
    assert c.closed_within(10)
    assert 1.5 < time.monotonic() - t0 < 6
    c.close()
    in_log(r, "SSL_accept error from %s: timed out" % local_client())


def test_garbage_instead_of_client_hello_is_logged_and_closed(tls_relay):
    for n in (1, 2):
        c = Conn(tls_relay.port)
        assert c.cmd("STARTTLS").startswith("220 ")
        c.s.sendall(b"EHLO this is not a ClientHello\r\n" * 4)
        assert c.closed_within(10)
        c.close()
        in_log(tls_relay, "(tls_handshake_failures=%d)" % n)
    tls_relay.log_matching(re.escape("SSL_accept error from %s: " % local_client()))
    assert tls_relay.greets()


def test_help_names_starttls_only_while_it_is_offered(tls_relay):
    c = Conn(tls_relay.port)
    assert "STARTTLS" in c.cmd("HELP")
    c.cmd("EHLO client.test")
    assert c.cmd("STARTTLS").startswith("220 ")
    c.start_tls()
    help_text = c.cmd("HELP")
    assert help_text.startswith("214 ") and "STARTTLS" not in help_text, help_text
    c.close()


def test_smtps_sends_close_notify_after_quit(tls_relay):
    c = Conn(tls_relay.port)
    c.cmd("EHLO client.test")
    assert c.cmd("STARTTLS").startswith("220 ")
    # Ragged EOFs not suppressed: a close without close_notify raises.
    c.s = CLIENT_CONTEXT.wrap_socket(c.s, suppress_ragged_eofs=False)
    assert c.cmd("EHLO client.test").startswith("250")
    assert c.cmd("QUIT").startswith("221 ")
    c.s.settimeout(10)
    assert c.s.recv(100) == b""
    c.close()


def test_session_resumption(tls_relay):
    def session(resume):
        c = Conn(tls_relay.port)
        c.cmd("EHLO client.test")
        assert c.cmd("STARTTLS").startswith("220 ")
        c.start_tls(session=resume)
        c.cmd("EHLO client.test")  # TLS 1.3 tickets come after the handshake
        reused, s = c.s.session_reused, c.s.session
        c.cmd("QUIT")
        c.close()
        return reused, s

    reused, first = session(None)
    assert not reused
    reused, _ = session(first)
    assert reused


def s_client(port, *args):
    return subprocess.run(["openssl", "s_client", "-starttls", "smtp", "-connect",
                           "127.0.0.1:%d" % port, "-brief", *args],
                          input="QUIT\n", capture_output=True, text=True, timeout=30)


def test_openssl_s_client_protocols(tls_relay):
    r = s_client(tls_relay.port)
    assert "Protocol version: TLSv1.3" in r.stderr, r.stderr
    r = s_client(tls_relay.port, "-tls1_2")
    assert "Protocol version: TLSv1.2" in r.stderr, r.stderr
    assert "Ciphersuite: ECDHE-RSA-" in r.stderr, r.stderr
    # Security level 0 lets this client offer TLS 1.1 at all: the refusal is ours.
    for old in ("-tls1_1", "-tls1"):
        r = s_client(tls_relay.port, old, "-cipher", "DEFAULT:@SECLEVEL=0")
        assert r.returncode != 0 and "Protocol version" not in r.stderr, r.stderr
        assert "protocol version" in r.stderr or "unsupported protocol" in r.stderr, r.stderr
    # A weak TLS 1.2 cipher is not accepted either.
    r = s_client(tls_relay.port, "-tls1_2", "-cipher", "AES128-SHA:@SECLEVEL=0")
    assert r.returncode != 0 and "Protocol version" not in r.stderr, r.stderr


@pytest.mark.skipif(not shutil.which("testssl.sh") and not shutil.which("testssl"),
                    reason="testssl.sh is not installed")
def test_testssl_finds_no_old_protocol_and_no_vulnerability(tls_relay, tmp_path):
    tool = shutil.which("testssl.sh") or shutil.which("testssl")
    out = tmp_path / "testssl.json"
    r = subprocess.run([tool, "--quiet", "--color", "0", "--warnings", "off", "--ip", "one",
                        "--starttls", "smtp", "--protocols", "--vulnerable", "--std",
                        "--jsonfile", str(out), "127.0.0.1:%d" % tls_relay.port],
                       capture_output=True, text=True, timeout=300)
    import json
    findings = {f["id"]: f for f in json.loads(out.read_text())}
    for proto in ("SSLv2", "SSLv3", "TLS1", "TLS1_1"):
        assert findings[proto]["finding"] == "not offered", findings[proto]
    assert findings["TLS1_3"]["finding"].startswith("offered"), findings["TLS1_3"]
    bad = [f for f in findings.values()
           if f["severity"] in ("HIGH", "CRITICAL", "MEDIUM")]
    assert not bad, (bad, r.stdout[-3000:])


def check_config(config):
    return subprocess.run([SMX, "check-config", "-c", config], capture_output=True, text=True,
                          timeout=30)


def test_check_config_reads_the_certificate_and_key(tmp_path, certs):
    cert, key = certs["server"]
    _, other_key = certs["other"]
    cfg = tmp_path / "smx.toml"

    def write(c, k, level=""):
        cfg.write_text('[server]\ntls_cert = "%s"\ntls_key = "%s"\n%s' % (c, k, level))

    write(cert, key)
    r = check_config(str(cfg))
    assert r.returncode == 0, r.stderr
    write(cert, str(tmp_path / "missing.key"))
    r = check_config(str(cfg))
    assert r.returncode == 2
    assert "server.tls_key: cannot read " in r.stderr and "No such file" in r.stderr, r.stderr
    write(cert, other_key)
    r = check_config(str(cfg))
    assert r.returncode == 2
    assert "server.tls_key: " in r.stderr and "does not match the certificate" in r.stderr
    write(key, key)  # a key where the certificate should be
    r = check_config(str(cfg))
    assert r.returncode == 2 and "server.tls_cert: " in r.stderr, r.stderr
    # Level none does not use them, so does not read them.
    write(cert, other_key, 'tls_security_level = "none"\n')
    assert check_config(str(cfg)).returncode == 0
    cfg.write_text('[server]\ntls_security_level = "encrypt"\n')
    r = check_config(str(cfg))
    assert r.returncode == 2 and "needs tls_cert and tls_key" in r.stderr, r.stderr


# SMTPC: STARTTLS to the next hop.

def tls_sink(make_sink, certs, *args):
    return make_sink("--tls", "%s,%s" % certs["server"], *args)


def policy(level, more=""):
    return '[tls_policy]\n"example.org" = "%s"\n' % level + more


def test_smtpc_uses_starttls_when_offered_and_keeps_the_connection(make_sink, make_relay,
                                                                   certs):
    s = tls_sink(make_sink, certs)
    r = make_relay(s.port)
    for i in range(2):
        send(r.port, "a@client.test", ["b@example.org"], b"Subject: %d\r\n\r\nbody\r\n" % i)
        wait_until(lambda: s.count() == i + 1, 30, "message %d at the sink" % i)
    assert all(m["tls"].startswith("TLSv1.3 ") for m in s.messages()), s.messages()
    in_log(r, "Untrusted TLS connection established to 127.0.0.1[127.0.0.1]:%d: TLSv1.3 "
              "with cipher TLS_" % s.port)
    # The second message went over the cached TLS connection.
    time.sleep(1.5)  # info lines are flushed once a second
    assert r.log_text().count("TLS connection established to") == 1


def test_smtpc_resumes_its_tls_session_on_the_next_connection(make_sink, make_relay, certs):
    s = tls_sink(make_sink, certs)
    # One message per connection: each one is a new TLS handshake.
    r = make_relay(s.port, "[client]\nmax_msgs_per_connection = 1\n")
    for i in range(3):
        send(r.port, "a@client.test", ["b@example.org"], b"Subject: %d\r\n\r\nbody\r\n" % i)
        wait_until(lambda: s.count() == i + 1, 30, "message %d at the sink" % i)
    msgs = sorted(s.messages(), key=lambda m: int(m["name"].split(".")[0]))
    # TLS 1.3: the session came as a ticket after the first handshake.
    assert all(m["tls"].startswith("TLSv1.3 ") for m in msgs), msgs
    assert [m["resumed"] for m in msgs] == [False, True, True], msgs
    in_log(r, "Untrusted TLS connection established to 127.0.0.1[127.0.0.1]:%d: TLSv1.3 "
              "with cipher TLS_" % s.port)
    in_log(r, "(session resumed)")


def test_smtpc_encrypt_to_a_next_hop_that_requires_tls(make_sink, make_relay, certs):
    s = tls_sink(make_sink, certs, "--require-tls")
    r = make_relay(s.port, policy("encrypt"))
    send(r.port, "a@client.test", ["b@example.org"], b"Subject: x\r\n\r\nbody\r\n")
    wait_until(lambda: s.count() == 1, 30, "the message at the sink")
    assert s.messages()[0]["tls"].startswith("TLSv1.3 ")


def test_smtpc_encrypt_defers_when_tls_is_not_offered(make_sink, make_relay):
    s = make_sink()
    r = make_relay(s.port, policy("encrypt"))
    send(r.port, "a@client.test", ["b@example.org"], b"Subject: x\r\n\r\nbody\r\n")
    in_log(r, "status=deferred (451 4.7.4 TLS is required, but was not offered by host 127.0.0.1")
    assert s.count() == 0


def test_smtpc_may_falls_back_to_plaintext_when_the_handshake_fails(make_sink, make_relay):
    s = make_sink("--broken-tls")
    r = make_relay(s.port)
    send(r.port, "a@client.test", ["b@example.org"], b"Subject: x\r\n\r\nbody\r\n")
    wait_until(lambda: s.count() == 1, 30, "the message at the sink")
    assert s.messages()[0]["tls"] is None
    in_log(r, "TLS handshake with 127.0.0.1[127.0.0.1]:%d failed: " % s.port)
    in_log(r, "; trying again without TLS")


def test_smtpc_encrypt_does_not_fall_back(make_sink, make_relay):
    s = make_sink("--broken-tls")
    r = make_relay(s.port, policy("encrypt"))
    send(r.port, "a@client.test", ["b@example.org"], b"Subject: x\r\n\r\nbody\r\n")
    in_log(r, "status=deferred (451 4.7.5 TLS handshake with 127.0.0.1[127.0.0.1]:%d failed: " % s.port)
    assert s.count() == 0


def test_smtpc_verify_checks_the_chain_and_the_name(make_sink, make_relay, certs, tmp_path):
    s = tls_sink(make_sink, certs)
    good = make_relay(s.port, policy("verify", '[client]\ntls_ca_file = "%s"\n'
                                      % certs["server"][0]))
    send(good.port, "a@client.test", ["b@example.org"], b"Subject: x\r\n\r\nbody\r\n")
    wait_until(lambda: s.count() == 1, 30, "the message at the sink")
    in_log(good, "Verified TLS connection established to 127.0.0.1[127.0.0.1]:%d" % s.port)
    good.stop()
    # Trusting another certificate: the next hop's does not chain to it.
    os.makedirs(tmp_path / "bad")
    bad = Relay(str(tmp_path / "bad"), s.port,
                policy("verify", '[client]\ntls_ca_file = "%s"\n' % certs["other"][0])).start()
    try:
        send(bad.port, "a@client.test", ["c@example.org"], b"Subject: y\r\n\r\nbody\r\n")
        in_log(bad, "certificate verify failed")
        in_log(bad, "status=deferred (451 4.7.5 TLS handshake with 127.0.0.1[127.0.0.1]:%d failed: "
                    % s.port)
        assert s.count() == 1
    finally:
        bad.stop()


def test_check_config_reads_the_client_ca_file(tmp_path):
    cfg = tmp_path / "smx.toml"
    cfg.write_text('[client]\ntls_ca_file = "%s"\n' % (tmp_path / "missing.pem"))
    r = check_config(str(cfg))
    assert r.returncode == 2 and "client.tls_ca_file: cannot read " in r.stderr, r.stderr
    cfg.write_text('[tls_policy]\n"example.org" = "sometimes"\n')
    r = check_config(str(cfg))
    assert r.returncode == 2 and "tls_policy.example.org: must be" in r.stderr, r.stderr
