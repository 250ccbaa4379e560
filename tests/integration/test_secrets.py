"""Secrets travel through the MCP (issue 25): `smx run` reads the TLS
certificate and key, the client CA bundle and the SASL password file as root,
so root:root 0600 files in a 0700 directory work while the children run as
smxs, smxq and smxc; each child gets only its own, over its link to the MCP,
at start and on reload. `smx check-config` says what `smx run` would. A child
that cannot start at its first start stops `smx run` (exit 2, its reason)
instead of leaving a listener that never greets.

Root only: the children switch users (see test_privsep.py)."""
import os
import pwd
import grp
import re
import shutil
import socket
import subprocess
import time

import pytest

from conftest import SMX, Relay, send, wait_until
from test_auth import PASSWORD, make_peer, needs_postfix  # noqa: F401 (fixture)
from test_privsep import as_user, make_separate, root_only  # noqa: F401
from test_reload import der, peer_cert, reload, rewrite
from test_tls import make_cert

SMTPS = ("smxs", "smx", ["smx", "smxs"])


def private_dir(parent):
    """A directory only root may enter, as /etc/ssl/private or certbot's."""
    d = os.path.join(parent, "private")
    os.makedirs(d, exist_ok=True)
    os.chmod(d, 0o700)
    return d


def root_only_file(path):
    os.chown(path, 0, 0)
    os.chmod(path, 0o600)
    return path


def root_only_cert(parent, name, cn):
    """A certificate and its key, both root:root 0600 in private/."""
    cert, key = make_cert(private_dir(parent), name, cn)
    return root_only_file(cert), root_only_file(key)


def certbot_layout(parent, cn):
    """live/CN/fullchain.pem and privkey.pem are relative links into
    archive/CN/, as certbot makes them; all of it root-only."""
    top = private_dir(parent)
    archive = os.path.join(top, "archive", cn)
    live = os.path.join(top, "live", cn)
    os.makedirs(archive)
    os.makedirs(live)
    cert, key = make_cert(archive, "cert1", cn)
    os.symlink("../../archive/%s/cert1.crt" % cn, os.path.join(live, "fullchain.pem"))
    os.symlink("../../archive/%s/cert1.key" % cn, os.path.join(live, "privkey.pem"))
    root_only_file(cert)
    root_only_file(key)
    return cert, os.path.join(live, "fullchain.pem"), os.path.join(live, "privkey.pem")


def tls_conf(cert, key):
    return '[server]\ntls_cert = "%s"\ntls_key = "%s"\n' % (cert, key)


def environ_of(pid):
    with open("/proc/%d/environ" % pid, "rb") as f:
        return f.read().split(b"\0")


@root_only
def test_a_root_only_key_behind_certbot_links_serves_starttls(sink, make_separate, open_dir):
    real_cert, cert, key = certbot_layout(open_dir, "smx.test")
    relay = make_separate(sink.port, tls_conf(cert, key))
    # SMTPS's account cannot read it: only the MCP could.
    r = as_user(SMTPS[0], SMTPS[1], "cat", key, groups=SMTPS[2])
    assert r.returncode != 0 and "Permission denied" in r.stderr, r
    r = subprocess.run(["swaks", "--server", "127.0.0.1", "--port", str(relay.port), "--tls",
                        "--helo", "client.test", "--from", "a@client.test",
                        "--to", "b@example.org", "--body", "over TLS"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "TLS started" in r.stdout, r.stdout
    wait_until(lambda: sink.count() == 1, 30, "the message at the sink")
    assert b"with ESMTPS" in sink.messages()[0]["data"]
    assert peer_cert(relay.port) == der(real_cert)
    # SMTPS and SMTPC have a link to the MCP, QMGR none.
    for child, linked in (("smx-smtps", True), ("smx-smtpc", True), ("smx-qmgr", False)):
        pid = wait_until(lambda: relay.child_pids(child), 10, child)[0]
        assert any(v.startswith(b"SMX_MCP_FD=") for v in environ_of(pid)) == linked, child


@root_only
def test_reload_passes_a_new_certificate_and_refuses_a_broken_key(sink, make_separate,
                                                                   open_dir):
    old = root_only_cert(open_dir, "old", "old.test")
    new = root_only_cert(open_dir, "new", "new.test")
    relay = make_separate(sink.port, tls_conf(*old))
    assert peer_cert(relay.port) == der(old[0])
    rewrite(relay, sink.port, tls_conf(*new))
    reload(relay)
    # The next connection gets the new one.
    assert peer_cert(relay.port) == der(new[0])

    # A key that does not belong to the certificate: refused, with the
    # reason, and the children are not told to reload.
    before = relay.log_text().count("config reloaded from")
    rewrite(relay, sink.port, tls_conf(new[0], old[1]))
    r = relay.smx("reload", check=False)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert r.stderr.startswith("smx: reload: config error: server.tls_key: %s does not match "
                               "the certificate in %s" % (old[1], new[0])), r.stderr
    assert "keeping the running configuration" in r.stderr
    assert peer_cert(relay.port) == der(new[0])
    send(relay.port, "a@client.test", ["b@example.org"], b"Subject: still\r\n\r\nhere\r\n")
    wait_until(lambda: sink.count() == 1, 30, "mail after the refused reload")
    assert relay.log_text().count("config reloaded from") == before


@root_only
def test_smtpc_verifies_with_a_root_only_ca_file(make_sink, make_separate, open_dir, tmp_path):
    cert, key = make_cert(str(tmp_path), "sink", "sink.test")
    s = make_sink("--tls", "%s,%s" % (cert, key))
    ca = root_only_file(shutil.copy(cert, os.path.join(private_dir(open_dir), "ca.pem")))
    relay = make_separate(s.port, '[client]\ntls_ca_file = "%s"\n'
                          '[tls_policy]\n"example.org" = "verify"\n' % ca)
    send(relay.port, "a@client.test", ["b@example.org"], b"Subject: v\r\n\r\nbody\r\n")
    wait_until(lambda: s.count() == 1, 30, "the message at the TLS sink")
    wait_until(lambda: "Verified TLS connection established to 127.0.0.1[127.0.0.1]:%d" % s.port
               in relay.log_text(), 10, "the verified TLS line")


@root_only
@needs_postfix
def test_smtpc_authenticates_with_a_root_only_password_file(sink, make_peer, make_separate,
                                                            open_dir):
    peer = make_peer(sink.port)
    path = os.path.join(private_dir(open_dir), "sasl_passwd")
    with open(path, "w") as f:
        f.write("[127.0.0.1]:%d alice:%s\n" % (peer.port, PASSWORD))
    root_only_file(path)
    relay = make_separate(peer.port, '[client]\nsasl_password_file = "%s"\n' % path)
    send(relay.port, "a@client.test", ["b@example.org"], b"Subject: auth\r\n\r\nbody\r\n")
    wait_until(lambda: sink.count() == 1, 60, "the message through postfix at the sink")
    wait_until(lambda: "SASL authentication to 127.0.0.1[127.0.0.1]:%d succeeded as alice "
               "(AUTH PLAIN)" % peer.port in relay.log_text(), 10, "the AUTH line")
    assert PASSWORD not in relay.log_text()


@root_only
def test_check_config_gives_the_verdict_smx_run_would(open_dir, accounts):
    cert, key = root_only_cert(open_dir, "server", "smx.test")
    cfg = os.path.join(open_dir, "smx.toml")
    with open(cfg, "w") as f:
        f.write(tls_conf(cert, key) + '[queue]\nspool_dir = "%s/spool"\nrun_dir = "%s/run"\n'
                % (open_dir, open_dir))
    os.chmod(cfg, 0o644)
    smx = os.path.join(open_dir, "smx")  # the build tree may be out of smxs's reach
    shutil.copy(SMX, smx)
    r = subprocess.run([smx, "check-config", "-c", cfg], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0 and "config OK" in r.stdout, r.stderr
    # Another user cannot read the files, and neither could its smx run.
    want = "smx: config error: server.tls_cert: cannot read %s: Permission denied\n" % cert
    for command in ("check-config", "run"):
        r = as_user(SMTPS[0], SMTPS[1], smx, command, "-c", cfg, groups=SMTPS[2])
        assert (r.returncode, r.stderr) == (2, want), (command, r)
    assert not os.path.exists(os.path.join(open_dir, "spool"))
    # The certificate readable by its group, the key still not.
    os.chown(cert, 0, grp.getgrnam("smx").gr_gid)
    os.chmod(cert, 0o640)
    os.chmod(os.path.dirname(cert), 0o750)
    os.chown(os.path.dirname(cert), 0, grp.getgrnam("smx").gr_gid)
    r = as_user(SMTPS[0], SMTPS[1], smx, "check-config", "-c", cfg, groups=SMTPS[2])
    assert r.returncode == 2, r
    assert r.stderr == "smx: config error: server.tls_key: cannot read %s: Permission denied\n" \
        % key, r.stderr
    # A CA bundle without a certificate, as root.
    ca = os.path.join(os.path.dirname(cert), "ca.pem")
    with open(ca, "w") as f:
        f.write("not a certificate\n")
    root_only_file(ca)
    with open(cfg, "a") as f:
        f.write('[client]\ntls_ca_file = "%s"\n' % ca)
    r = subprocess.run([smx, "check-config", "-c", cfg], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2, r
    assert r.stderr == "smx: config error: client.tls_ca_file: %s: no certificate in it\n" % ca


def refused(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return False
    except ConnectionRefusedError:
        return True


def deny_by_acl(path, account):
    """path readable by everyone but account, through an ACL entry."""
    os.chmod(path, 0o644)
    subprocess.run(["setfacl", "-m", "u:%s:---" % account, path], check=True)


@root_only
@pytest.mark.parametrize("log_file", [False, True])
def test_a_child_that_cannot_start_stops_smx_run(sink, open_dir, accounts, log_file):
    """A real cause smx run cannot see coming: an ACL keeps SMTPS's account
    from reading the config (smx run judges reach by owners and modes, and
    lets an ACL pass). smx-smtps exits 2 at once; smx run stops with its
    reason instead of restarting it for ever."""
    extra = '[log]\nfile = "%s/smx.log"\n' % open_dir if log_file else ""
    relay = Relay(open_dir, sink.port, extra, separate_users=True)
    deny_by_acl(relay.config, "smxs")
    t0 = time.monotonic()
    r = subprocess.run([SMX, "run", "-c", relay.config], capture_output=True, text=True,
                       timeout=60)
    took = time.monotonic() - t0
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert took < 20, took
    # smx-pickup runs as SMTPS's account too; whichever comes first.
    m = re.search(r"smx-(smtps|pickup) exited with status 2 before it was ready: config %s: .*"
                  % re.escape(relay.config), r.stderr)
    assert m, r.stderr
    why = m.group(0)
    assert "restarting" not in r.stderr
    if log_file:
        with open(os.path.join(open_dir, "smx.log")) as f:
            assert why in f.read()
    assert refused(relay.port)


@root_only
def test_a_qmgr_that_cannot_read_the_config_stops_smx_run_with_status_2(sink, open_dir,
                                                                        accounts):
    relay = Relay(open_dir, sink.port, "", separate_users=True)
    deny_by_acl(relay.config, "smxq")
    r = subprocess.run([SMX, "run", "-c", relay.config], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2, (r.returncode, r.stderr)
    # QMGR's own line, then the MCP's.
    assert "smx-qmgr: %s: " % relay.config in r.stderr, r.stderr
    assert "smx-qmgr exited with status 2 before answering on %s/qmgr.sock; stopping" \
        % relay.run_dir in r.stderr, r.stderr
