"""The smart-host AUTH client of SMTPC (client.sasl_password_file), against a
real postfix smtpd with Cyrus SASL and a sasldb made by saslpasswd2, which
relays for authenticated clients to a test sink."""
import base64
import os
import subprocess

import pytest

from conftest import SMX, free_port, send, wait_until
from postfix_auth_peer import PostfixAuthPeer, available

PASSWORD = "s3cret pass:w0rd"

needs_postfix = pytest.mark.skipif(not available(),
                                   reason="needs root, postfix, sasl2-bin, libsasl2-modules")


def in_log(relay, text, timeout=30):
    wait_until(lambda: text in relay.log_text(), timeout, repr(text) + " in the log")


@pytest.fixture
def make_peer():
    made = []

    def make(sink_port, **kw):
        p = PostfixAuthPeer(free_port(), sink_port, {"alice": PASSWORD}, **kw)
        made.append(p)
        return p
    yield make
    for p in made:
        p.stop()


def credentials(tmp_path, nexthop, user="alice", password=PASSWORD, mode=0o600):
    path = tmp_path / "sasl_passwd"
    path.write_text("# smart host\n%s %s:%s\n" % (nexthop, user, password))
    os.chmod(path, mode)
    return '[client]\nsasl_password_file = "%s"\n' % path


def relay_via(make_relay, tmp_path, peer, **kw):
    """smx routing everything to peer, with credentials for it."""
    return make_relay(peer.port, credentials(tmp_path, "[127.0.0.1]:%d" % peer.port, **kw))


def secrets_in(text):
    plain = base64.b64encode(b"\0alice\0" + PASSWORD.encode()).decode()
    login = base64.b64encode(PASSWORD.encode()).decode()
    return [s for s in (PASSWORD, plain, login) if s in text]


@needs_postfix
def test_good_credentials_deliver_over_tls_with_auth_plain(sink, make_peer, make_relay,
                                                            tmp_path):
    peer = make_peer(sink.port)
    r = relay_via(make_relay, tmp_path, peer)
    send(r.port, "a@client.test", ["b@example.org"], b"Subject: auth\r\n\r\nbody\r\n")
    wait_until(lambda: sink.count() == 1, 60, "the message through postfix at the sink")
    in_log(r, "SASL authentication to 127.0.0.1[127.0.0.1]:%d succeeded as alice (AUTH PLAIN)"
           % peer.port)
    wait_until(lambda: "sasl_method=PLAIN, sasl_username=alice@auth.test" in peer.log(), 10,
               "postfix to log the authenticated client")
    # Its session summary, once smx's idle connection is closed.
    wait_until(lambda: "starttls=1 auth=1" in peer.log(), 20, "postfix's session summary")
    assert secrets_in(r.log_text()) == []


@needs_postfix
def test_auth_login_when_the_server_offers_only_login(sink, make_peer, make_relay, tmp_path):
    peer = make_peer(sink.port, mechs="LOGIN")
    r = relay_via(make_relay, tmp_path, peer)
    send(r.port, "a@client.test", ["b@example.org"], b"Subject: login\r\n\r\nbody\r\n")
    wait_until(lambda: sink.count() == 1, 60, "the message through postfix at the sink")
    in_log(r, "succeeded as alice (AUTH LOGIN)")
    wait_until(lambda: "sasl_method=LOGIN" in peer.log(), 10, "postfix to log AUTH LOGIN")


@needs_postfix
def test_bad_credentials_defer_and_the_log_has_no_secret(sink, make_peer, make_relay, tmp_path):
    peer = make_peer(sink.port)
    wrong = "wr0ng secret"
    r = relay_via(make_relay, tmp_path, peer, password=wrong)
    send(r.port, "a@client.test", ["b@example.org"], b"Subject: bad\r\n\r\nbody\r\n")
    in_log(r, "status=deferred (451 4.7.8 SASL authentication failed; host "
              "127.0.0.1[127.0.0.1]:%d said: 535 5.7.8 " % peer.port)
    wait_until(lambda: "SASL PLAIN authentication failed" in peer.log(), 10, "postfix's side")
    log = r.log_text()
    assert wrong not in log
    assert base64.b64encode(b"\0alice\0" + wrong.encode()).decode() not in log
    assert sink.count() == 0
    assert r.spool_files("cdb"), "the message must wait in the queue"


@needs_postfix
def test_no_auth_without_starttls_and_the_mail_waits(sink, make_peer, make_relay, tmp_path):
    # This postfix offers AUTH in plaintext and no STARTTLS.
    peer = make_peer(sink.port, tls=False)
    r = relay_via(make_relay, tmp_path, peer)
    send(r.port, "a@client.test", ["b@example.org"], b"Subject: plain\r\n\r\nbody\r\n")
    in_log(r, "status=deferred (451 4.7.4 TLS is required, but was not offered by host "
              "127.0.0.1[127.0.0.1]:%d" % peer.port)
    wait_until(lambda: "disconnect from" in peer.log(), 10, "postfix's session summary")
    # postfix counts every AUTH command in its disconnect line: there is none.
    disconnects = [l for l in peer.log().splitlines() if "disconnect from" in l]
    assert disconnects and all(" auth=" not in l for l in disconnects), disconnects
    assert sink.count() == 0
    assert r.spool_files("cdb"), "the message must wait in the queue"
    assert secrets_in(r.log_text()) == []


def check_config(tmp_path, extra):
    cfg = tmp_path / "smx.toml"
    cfg.write_text(extra)
    return subprocess.run([SMX, "check-config", "-c", str(cfg)], capture_output=True,
                          text=True, timeout=30)


def test_check_config_refuses_a_credentials_file_others_may_read(tmp_path):
    extra = credentials(tmp_path, "[smarthost.example]:587", mode=0o644)
    r = check_config(tmp_path, extra)
    assert r.returncode == 2, r.stdout + r.stderr
    assert ("client.sasl_password_file: %s is accessible by group or others (mode 0644)"
            % (tmp_path / "sasl_passwd")) in r.stderr, r.stderr
    assert PASSWORD not in r.stderr
    os.chmod(tmp_path / "sasl_passwd", 0o640)
    r = check_config(tmp_path, extra)
    assert r.returncode == 2 and "(mode 0640)" in r.stderr, r.stderr
    os.chmod(tmp_path / "sasl_passwd", 0o600)
    r = check_config(tmp_path, extra)
    assert r.returncode == 0, r.stderr


def test_check_config_refuses_what_is_not_a_regular_file_and_follows_links(tmp_path):
    os.mkdir(tmp_path / "dir")
    os.chmod(tmp_path / "dir", 0o700)
    r = check_config(tmp_path, '[client]\nsasl_password_file = "%s"\n' % (tmp_path / "dir"))
    assert r.returncode == 2 and "dir is not a regular file" in r.stderr, r.stderr
    # The path is the administrator's: smx run follows a link, and the file
    # it leads to must be private.
    credentials(tmp_path, "[smarthost.example]:587")
    os.symlink(tmp_path / "sasl_passwd", tmp_path / "link")
    r = check_config(tmp_path, '[client]\nsasl_password_file = "%s"\n' % (tmp_path / "link"))
    assert r.returncode == 0, r.stderr
    os.chmod(tmp_path / "sasl_passwd", 0o644)
    r = check_config(tmp_path, '[client]\nsasl_password_file = "%s"\n' % (tmp_path / "link"))
    assert r.returncode == 2 and "link is accessible by group or others (mode 0644)" in r.stderr, \
        r.stderr
    r = check_config(tmp_path, '[client]\nsasl_password_file = "%s"\n' % (tmp_path / "none"))
    assert r.returncode == 2 and "cannot read" in r.stderr, r.stderr


def test_check_config_names_the_bad_line_without_the_secret(tmp_path):
    path = tmp_path / "sasl_passwd"
    path.write_text("[a.example]:587 alice:x\n[A.example]:587 bob:y\n")
    os.chmod(path, 0o600)
    r = check_config(tmp_path, '[client]\nsasl_password_file = "%s"\n' % path)
    assert r.returncode == 2 and "line 2: a second entry for [a.example]:587" in r.stderr, \
        r.stderr
    path.write_text("[a.example]:587 alice-without-password\n")
    r = check_config(tmp_path, '[client]\nsasl_password_file = "%s"\n' % path)
    assert r.returncode == 2 and 'line 1: expected "nexthop user:password"' in r.stderr, \
        r.stderr
    assert "alice-without-password" not in r.stderr
    path.write_bytes(b"x" * (1 << 20) + b"\n")
    r = check_config(tmp_path, '[client]\nsasl_password_file = "%s"\n' % path)
    assert r.returncode == 2 and "is larger than 1048576 bytes" in r.stderr, r.stderr
