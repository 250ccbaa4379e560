"""The systemd unit and its snippets, and readiness with sd_notify (issue 12,
item 2)."""
import re
import os
import select
import shutil
import socket
import stat
import subprocess
import time

import pytest

from conftest import SMX, Relay, wait_until
from test_install import destdir, install  # noqa: F401  (destdir is a fixture)

UNIT = "usr/lib/systemd/system/smx.service"


def test_unit_passes_systemd_analyze_verify(destdir):  # noqa: F811
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze is not installed (apt-get install systemd)")
    install(destdir)
    # The units it names (multi-user.target, network-online.target, ...)
    # come from the system: copied beside ours into the staged root.
    system_units = "/usr/lib/systemd/system"
    if not os.path.exists(os.path.join(system_units, "multi-user.target")):
        system_units = "/lib/systemd/system"
    for name in os.listdir(system_units):
        if not (destdir / UNIT).parent.joinpath(name).exists():
            src = os.path.join(system_units, name)
            if os.path.isfile(src):
                shutil.copy(src, (destdir / UNIT).parent / name, follow_symlinks=True)
    # Documentation=man:... is looked up in the staged manual.
    r = subprocess.run(["systemd-analyze", "verify", "--root=%s" % destdir, "--man=yes",
                        "/" + UNIT], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, MANPATH=str(destdir / "usr/share/man")))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stderr == "", r.stderr
    unit = (destdir / UNIT).read_text()
    for line in ("Type=notify", "ExecStart=/usr/sbin/smx run -c /etc/smx/smx.toml",
                 "ReadWritePaths=/var/spool/smx", "RuntimeDirectory=smx", "NoNewPrivileges=yes",
                 "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes", "LimitNOFILE="):
        assert "\n" + line in unit, line
    assert "\nUser=" not in unit  # the MCP starts as root and drops privileges itself


def test_sysusers_and_tmpfiles_make_the_accounts_and_the_spool(destdir):  # noqa: F811
    for tool in ("systemd-sysusers", "systemd-tmpfiles"):
        if not shutil.which(tool):
            pytest.skip("%s is not installed (apt-get install systemd)" % tool)
    install(destdir)
    r = subprocess.run(["systemd-sysusers", "--root=%s" % destdir,
                        str(destdir / "usr/lib/sysusers.d/smx.conf")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    def entries(name):
        lines = (destdir / "etc" / name).read_text().splitlines()
        return {l.split(":")[0]: l.split(":") for l in lines}
    passwd, group = entries("passwd"), entries("group")
    assert "smx" in group and "smxdrop" in group
    for user in ("smxs", "smxq", "smxc"):
        assert user in passwd, user
        assert passwd[user][3] == group[user][2]  # a group of its own
        assert passwd[user][6] == "/usr/sbin/nologin"
    # tmpfiles looks the group up in the root's /etc/group: the one just made.
    r = subprocess.run(["systemd-tmpfiles", "--root=%s" % destdir, "--create",
                        str(destdir / "usr/lib/tmpfiles.d/smx.conf")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    # Others pass through (not list) to reach the maildrop with smx-postdrop.
    st = os.stat(destdir / "var/spool/smx")
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o751
    assert st.st_gid == int(group["smx"][2])
    drop = os.stat(destdir / "var/spool/smx/maildrop")
    assert stat.S_IMODE(drop.st_mode) == 0o1730
    assert drop.st_uid == int(passwd["smxs"][2]) and drop.st_gid == int(group["smxdrop"][2])


@pytest.fixture
def notify_socket(tmp_path):
    path = str(tmp_path / "notify")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(path)
    yield path, s
    s.close()


def test_ready_is_sent_only_after_smtps_greets(tmp_path, sink, notify_socket):
    path, ns = notify_socket
    # One event loop, so one listening socket: with one per loop
    # (SO_REUSEPORT) the kernel may hand this client and the MCP's probe to
    # different loops, and the probe's loop may greet first.
    relay = Relay(str(tmp_path), sink.port, extra="[server]\nthreads = 1")
    log = open(relay.log_path, "ab")
    proc = subprocess.Popen([SMX, "run", "-c", relay.config], stdout=log,
                            stderr=subprocess.STDOUT, env=dict(os.environ, NOTIFY_SOCKET=path))
    try:
        # `smx run` binds the port before it starts any child: connect as
        # soon as it is bound, before smx-smtps can answer, and wait for the
        # greeting and the notification side by side.
        deadline = time.monotonic() + 20
        while True:
            assert proc.poll() is None, relay.log_text()
            assert time.monotonic() < deadline, "port never bound"
            try:
                client = socket.create_connection(("127.0.0.1", relay.port), timeout=1)
                break
            except OSError:
                time.sleep(0.005)
        events = []
        greeting = b""
        while "ready" not in events and time.monotonic() < deadline:
            readable, _, _ = select.select([client, ns], [], [], 0.2)
            # The greeting first if both are there: it may have come first.
            if client in readable and "greeting" not in events:
                greeting = client.recv(512)
                events.append("greeting")
            if ns in readable:
                msg = ns.recv(4096).decode()
                assert "READY=1" in msg.split("\n"), msg
                events.append("ready")
        assert events == ["greeting", "ready"], (events, relay.log_text())
        assert greeting.startswith(b"220 "), greeting
        client.close()
        # On SIGTERM: STOPPING=1 before it exits.
        proc.terminate()
        proc.wait(15)
        assert proc.returncode == 0
        ns.settimeout(1)
        assert "STOPPING=1" in ns.recv(4096).decode().split("\n")
        relay.log_matching(re.escape("ready: smx-smtps answers"))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


def test_a_notify_socket_nobody_listens_on_is_logged_and_smx_runs_on(tmp_path, sink):
    missing = str(tmp_path / "no-such-notify")
    relay = Relay(str(tmp_path), sink.port)
    log = open(relay.log_path, "ab")
    proc = subprocess.Popen([SMX, "run", "-c", relay.config], stdout=log,
                            stderr=subprocess.STDOUT, env=dict(os.environ, NOTIFY_SOCKET=missing))
    relay.proc = proc
    try:
        wait_until(lambda: "cannot notify" in relay.log_text(), 20, "the warning")
        assert "cannot notify the service manager at %s (READY=1): " % missing \
            in relay.log_text()
        assert relay.greets()
    finally:
        relay.stop()
        log.close()


def test_without_notify_socket_nothing_is_sent_and_it_runs(tmp_path, sink):
    assert "NOTIFY_SOCKET" not in os.environ
    relay = Relay(str(tmp_path), sink.port)
    try:
        relay.start()
        assert relay.greets()
        wait_until(lambda: "ready: smx-smtps answers" in relay.log_text(), 10, "ready")
        assert "cannot notify" not in relay.log_text()
    finally:
        relay.stop()
