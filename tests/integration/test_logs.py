"""Where the log lines go: a file or syslog (issue 12, item 6), in the line
format docs/operation.md calls stable."""
import os
import re
import socket
import subprocess
import threading
import time

import pytest

from conftest import SMX, send, wait_until

MESSAGE = b"Subject: log test\r\n\r\nhello\r\n"
# docs/operation.md: "smx/PROCESS[PID]: QUEUEID: to=<RCPT>, relay=..., delay=..., status=..."
SENT = r"smx/qmgr\[\d+\]: ([0-9A-F]+): to=<bob@example\.net>, relay=127\.0\.0\.1\[127\.0\.0\.1\]:\d+, delay=[\d.]+, status=sent \(250 "


def test_log_file_gets_every_process_in_the_stable_format(sink, make_relay, tmp_path):
    path = tmp_path / "mail.log"
    relay = make_relay(sink.port, '[log]\nfile = "%s"' % path)
    send(relay.port, "alice@client.test", ["bob@example.net"], MESSAGE)
    wait_until(lambda: re.search(SENT, path.read_text()), 20, "status=sent in the log file")
    relay.stop()
    lines = path.read_text().splitlines()
    stamp = r"^[A-Z][a-z]{2} \d\d \d\d:\d\d:\d\d\.\d{3} "
    for proc in ("mcp", "qmgr", "smtps", "smtpc"):
        assert any(re.match(stamp + r"smx/%s\[\d+\]: " % proc, l) for l in lines), proc
    assert all(re.match(stamp + r"smx/\w+\[\d+\]: ", l) for l in lines), lines
    qid = re.search(SENT, path.read_text()).group(1)
    assert re.search(r"smx/smtps\[\d+\]: %s: from=<alice@client\.test>, size=\d+, nrcpt=1 "
                     r"\(queued\)" % qid, path.read_text())
    assert re.search(r"smx/qmgr\[\d+\]: %s: removed$" % qid, path.read_text(), re.M)
    # Nothing went to stderr.
    assert relay.log_text() == ""


class SyslogReader:
    """A stand-in for /dev/log, read by a thread of the test (as a syslog
    daemon would) once started."""

    def __init__(self, path, rcvbuf=None):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.bind(path)
        self.sock.settimeout(0.1)
        self.got = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._read)

    def start(self):
        self.thread.start()
        return self

    def _read(self):
        while not self.done.is_set():
            try:
                self.got.append(self.sock.recv(65536).decode())
            except socket.timeout:
                pass

    def read(self):
        return list(self.got)

    def close(self):
        self.done.set()
        if self.thread.is_alive():
            self.thread.join()
        self.sock.close()


@pytest.fixture
def syslog_socket(tmp_path):
    r = SyslogReader(str(tmp_path / "log.sock"))
    yield r
    r.close()


def test_syslog_gets_one_datagram_per_line_with_facility_and_severity(sink, make_relay,
                                                                      syslog_socket):
    read = syslog_socket.start().read
    relay = make_relay(sink.port, '[log]\nsyslog = "%s"\nsyslog_facility = "local3"'
                       % syslog_socket.path)
    send(relay.port, "alice@client.test", ["bob@example.net"], MESSAGE)
    wait_until(lambda: any(re.search(SENT, d) for d in read()), 20, "status=sent via syslog")
    relay.stop()
    got = read()
    # local3 = 19: info is <158>, warnings <156>.
    assert any(re.fullmatch(r"<158>" + SENT + r".*\)", d) for d in got), got
    assert any(re.fullmatch(r"<158>smx/mcp\[\d+\]: starting smx-qmgr \(pid \d+\)", d)
               for d in got), got
    for proc in ("mcp", "qmgr", "smtps", "smtpc"):
        assert any(d.startswith("<158>smx/%s[" % proc) for d in got), proc
    assert all(re.match(r"<15[0-9]>smx/\w+\[\d+\]: \S", d) and "\n" not in d for d in got), got
    assert relay.log_text() == ""  # nothing on stderr


def test_errors_have_syslog_severity_3(tmp_path, syslog_socket):
    path, read = syslog_socket.path, syslog_socket.start().read
    conf = tmp_path / "smx.toml"
    # A config whose listen address is taken: `smx run` logs an error and exits.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        conf.write_text('[server]\nlisten = ["127.0.0.1:%d"]\n[queue]\nspool_dir = "%s"\n'
                        'run_dir = "%s"\n[log]\nsyslog = "%s"\n'
                        % (port, tmp_path / "spool", tmp_path / "run", path))
        r = subprocess.run([SMX, "run", "-c", str(conf)], capture_output=True, text=True,
                           timeout=30)
    assert r.returncode == 1
    # The error is on stderr too, for whoever started it.
    assert "cannot listen on 127.0.0.1:%d" % port in r.stderr
    wait_until(lambda: any("cannot listen" in d for d in read()), 10, "the error via syslog")
    got = read()
    assert any(re.fullmatch(r"<19>smx/mcp\[\d+\]: cannot listen on 127\.0\.0\.1:%d: .*" % port, d)
               for d in got), got  # mail (2) * 8 + error (3)


def test_a_syslog_socket_nobody_reads_does_not_stop_the_mail(sink, make_relay, tmp_path,
                                                              request):
    """Its queue is full after a few lines (a small receive buffer; Linux
    also stops at net.unix.max_dgram_qlen datagrams); then each process
    waits a second once, drops lines without waiting until the socket takes
    one again, and says how many it dropped."""
    syslog_socket = SyslogReader(str(tmp_path / "log.sock"), rcvbuf=2048)
    request.addfinalizer(syslog_socket.close)
    relay = make_relay(sink.port, '[log]\nsyslog = "%s"' % syslog_socket.path)
    send(relay.port, "alice@client.test", ["bob@example.net"], MESSAGE)
    wait_until(lambda: sink.count() == 1, 20, "the message at the sink")
    time.sleep(1.5)  # past the one second a process waits for the socket
    syslog_socket.start()
    send(relay.port, "alice@client.test", ["bob@example.net"], MESSAGE)
    wait_until(lambda: sink.count() == 2, 20, "the second message at the sink")
    wait_until(lambda: any(re.fullmatch(r"<20>smx/\w+\[\d+\]: \d+ log lines dropped: the syslog "
                                        r"socket did not take them", d)
                           for d in syslog_socket.read()), 20,
               "the dropped-lines note in %s" % syslog_socket.read())
    # QMGR logs status=sent after the sink has the message, and the note
    # above may be another process's: wait for the line, do not race it.
    wait_until(lambda: any(re.search(SENT, d) for d in syslog_socket.read()), 20,
               "status=sent via syslog in %s" % syslog_socket.read())


def test_unreachable_syslog_socket_falls_back_to_stderr(sink, make_relay, tmp_path):
    missing = tmp_path / "no-such.sock"
    relay = make_relay(sink.port, '[log]\nsyslog = "%s"' % missing)
    send(relay.port, "alice@client.test", ["bob@example.net"], MESSAGE)
    wait_until(lambda: re.search(SENT, relay.log_text()), 20, "status=sent on stderr")
    assert "cannot connect to syslog socket %s: No such file or directory; logging to stderr" \
        % missing in relay.log_text()


@pytest.mark.parametrize("log, error", [
    ('file = "x.log"\nsyslog = "/dev/log"', "log.syslog: set log.file or log.syslog, not both"),
    ('syslog = "/dev/log"\nsyslog_facility = "kern"', "log.syslog_facility: must be mail"),
])
def test_bad_log_config_is_refused(tmp_path, log, error):
    conf = tmp_path / "smx.toml"
    conf.write_text("[log]\n" + log + "\n")
    r = subprocess.run([SMX, "check-config", "-c", str(conf)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2
    assert error in r.stderr
