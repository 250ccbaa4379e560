"""Where the log lines go and what they look like (issue 12, item 6; issue
26, items 4 and 5): a file, syslog or the journal, in the shape postfix's
tools read, proven with the tools themselves (pflogsumm, fail2ban-regex,
logrotate: scripts/test installs them), and a file that survives rotation."""
import os
import re
import shutil
import signal
import smtplib
import socket
import stat
import subprocess
import threading
import time

import pytest

from conftest import REPO, SMX, local_client, send, wait_until

MESSAGE = b"Subject: log test\r\nMessage-ID: <log-test@client.test>\r\n\r\nhello\r\n"
# docs/operation.md, Logs: "smx/PROCESS[PID]: QUEUEID: to=<RCPT>, relay=..., status=..."
# The client, as smx names 127.0.0.1 (policy.client_name_lookup).
CLIENT = re.escape(local_client())
SENT = (r"smx/qmgr\[\d+\]: ([0-9A-F]+): to=<bob@example\.net>, relay=127\.0\.0\.1\[127\.0\.0\.1\]:\d+, "
        r"delay=[\d.]+, delays=[\d.]+/[\d.]+/[\d.]+/[\d.]+, dsn=2\.0\.0, status=sent \(250 ")
# "Nov  4 21:00:00 host ": syslog's time stamp, to the second, and the host.
HOST = socket.gethostname().split(".")[0]
STAMP = r"^[A-Z][a-z]{2} [ 123]\d \d\d:\d\d:\d\d %s " % re.escape(HOST)


def test_log_file_has_the_shape_of_syslog_and_postfix_program_names(sink, make_relay, tmp_path):
    path = tmp_path / "mail.log"
    relay = make_relay(sink.port, '[log]\nfile = "%s"' % path)
    send(relay.port, "alice@client.test", ["bob@example.net"], MESSAGE)
    wait_until(lambda: re.search(SENT, path.read_text()), 20, "status=sent in the log file")
    relay.stop()
    text = path.read_text()
    lines = text.splitlines()
    assert all(re.match(STAMP + r"smx/(mcp|qmgr|smtpd|smtp|pickup|cleanup|bounce)\[\d+\]: \S", l)
               for l in lines), lines
    for prog in ("mcp", "qmgr", "smtpd", "smtp", "cleanup"):
        assert any(re.match(STAMP + r"smx/%s\[\d+\]: " % prog, l) for l in lines), prog
    qid = re.search(SENT, text).group(1)
    # One line per event, keyed by the queue id; each process's in the order
    # it logged them (the processes' lines interleave as they come).
    for events in ([r"smx/smtpd\[\d+\]: %s: client=" + CLIENT + r"$",
                    r"smx/cleanup\[\d+\]: %s: message-id=<log-test@client\.test>$",
                    r"smx/smtpd\[\d+\]: %s: from=<alice@client\.test>, size=\d+, nrcpt=1 \(queued\)$"],
                   [r"smx/qmgr\[\d+\]: %s: from=<alice@client\.test>, size=\d+, nrcpt=1 \(queue active\)$",
                    r"smx/qmgr\[\d+\]: %s: to=<bob@example\.net>, relay=127\.0\.0\.1\[127\.0\.0\.1\]:\d+, "
                    r"delay=[\d.]+, delays=[\d.]+/[\d.]+/[\d.]+/[\d.]+, dsn=2\.0\.0, status=sent \(250 .*\)$",
                    r"smx/qmgr\[\d+\]: %s: removed$"]):
        at = [next(i for i, l in enumerate(lines) if re.search(e % qid, l)) for e in events]
        assert at == sorted(at), [lines[i] for i in at]
    # The session, as postfix's smtpd logs one.
    assert re.search(r"smx/smtpd\[\d+\]: disconnect from " + CLIENT + r" ehlo=1 mail=1 "
                     r"rcpt=1 data=1 quit=1 commands=5$", text, re.M)
    # Nothing went to stderr.
    assert relay.log_text() == ""


def test_failures_name_no_relay_and_every_refusal_is_logged_with_its_code(make_sink, make_relay,
                                                                          tmp_path):
    sink = make_sink("--permfail", "@bounce\\.test$")
    path = tmp_path / "mail.log"
    relay = make_relay(sink.port, '[server]\nmax_message_size = 4096\n'
                                  '[routes]\n"down.test" = "[127.0.0.1]:9"\n'
                                  '[log]\nfile = "%s"' % path)
    send(relay.port, "", ["x@bounce.test", "y@down.test"], MESSAGE)
    log = lambda: path.read_text()
    wait_until(lambda: "status=deferred" in log() and "status=bounced" in log(), 20,
               "the bounce and the deferral")
    # A connection that failed: relay=none, SMTPC's status code.
    assert re.search(r"smx/qmgr\[\d+\]: [0-9A-F]+: to=<y@down\.test>, relay=none, delay=[\d.]+, "
                     r"delays=[\d.]+/[\d.]+/[\d.]+/[\d.]+, dsn=4\.4\.1, status=deferred \(.*\)$",
                     log(), re.M), log()
    assert re.search(r"smx/qmgr\[\d+\]: [0-9A-F]+: to=<x@bounce\.test>, relay=127\.0\.0\.1\[127\.0\.0\.1\]:\d+, "
                     r"delay=[\d.]+, delays=[\d.]+/[\d.]+/[\d.]+/[\d.]+, dsn=5\.1\.1, "
                     r"status=bounced \(550 .*\)$", log(), re.M), log()

    # Refusals: each with its code, a queue id once a recipient was taken.
    with smtplib.SMTP("127.0.0.1", relay.port, timeout=30) as c:
        c.ehlo("client.test")
        assert c.mail("a@client.test", ["SIZE=5000"])[0] == 552
        assert c.docmd("RCPT TO:<b@example.net>")[0] == 503
        assert c.docmd("FROB")[0] == 500
        assert c.mail("a@client.test")[0] == 250
        assert c.rcpt("b@example.net")[0] == 250
        assert c.data(b"Subject: big\r\n\r\n" + b"x" * 8000 + b"\r\n")[0] == 552
    who = r"smx/smtpd\[\d+\]: "
    # The session's summary: what each command got.
    wait_until(lambda: re.search(who + r"disconnect from " + CLIENT + r" ehlo=1 mail=1/2 "
                                 r"rcpt=1/2 data=0/1 quit=1 unknown=0/1 commands=4/8$", log(), re.M),
               10, "the session's end")
    text = log()
    assert re.search(who + r"NOQUEUE: reject: MAIL from " + CLIENT + r": 552 5\.3\.4 Message "
                     r"size exceeds fixed limit; from=<a@client\.test> proto=ESMTP helo=<client\.test>$",
                     text, re.M), text
    assert re.search(who + r"NOQUEUE: error: RCPT from " + CLIENT + r": 503 5\.5\.1 Error: need "
                     r"MAIL command; proto=ESMTP helo=<client\.test>$", text, re.M), text
    assert re.search(who + r"NOQUEUE: error: UNKNOWN from " + CLIENT + r": 500 5\.5\.2 Error: "
                     r"command not recognized; proto=ESMTP helo=<client\.test>$", text, re.M), text
    assert re.search(who + r"[0-9A-F]{17}: reject: END-OF-MESSAGE from " + CLIENT + r": 552 "
                     r"5\.3\.4 Error: message file too big; from=<a@client\.test> to=<b@example\.net> "
                     r"proto=ESMTP helo=<client\.test>$", text, re.M), text
    # And counted: `smx stats` (SMTPS reports them each second).
    stats = wait_until(lambda: (lambda s: s if s["rejected"] == 4 else None)(relay.stats()), 10,
                       "the refusals counted")
    assert {k: v for k, v in stats.items() if k.startswith("rejected_")} == {
        "rejected_5xx_message_too_big": 2, "rejected_5xx_bad_command": 1,
        "rejected_5xx_bad_sequence": 1}, stats


# --- what postfix's tools make of it ------------------------------------

PFLOGSUMM = shutil.which("pflogsumm")
FAIL2BAN_REGEX = shutil.which("fail2ban-regex")
POSTFIX_FILTER = "/etc/fail2ban/filter.d/postfix.conf"


def untrusted(port, source, commands):
    """An SMTP session from another loopback address (outside relay_networks);
    returns the reply codes."""
    codes = []
    with smtplib.SMTP("127.0.0.1", port, timeout=30, source_address=(source, 0)) as c:
        codes.append(c.ehlo("spammer.test")[0])
        for cmd in commands:
            codes.append(c.docmd(cmd)[0])
            if codes[-1] == 421:
                break
    return codes


@pytest.fixture(params=["smx", "postfix-smx"])
def day_of_mail(request, make_sink, make_relay, tmp_path):
    """A log file of a known day: 4 messages received (2 delivered, 1
    deferred, 1 bounced), 2 refused (relay access, size), a flood of
    unknown commands from one address. Returns (syslog_name, path)."""
    name = request.param
    sink = make_sink("--tempfail-rcpt", "@defer\\.test$", "--permfail", "@bounce\\.test$")
    path = tmp_path / "mail.log"
    relay = make_relay(sink.port,
                       '[server]\nrelay_networks = ["127.0.0.1/32"]\n'
                       'relay_domains = ["example.net"]\n'
                       '[queue]\nretry_min = 60\nretry_max = 60\n'
                       '[log]\nfile = "%s"\nsyslog_name = "%s"' % (path, name))
    send(relay.port, "alice@client.test", ["a@example.net"], MESSAGE)
    send(relay.port, "alice@client.test", ["b@example.net"], MESSAGE)
    send(relay.port, "alice@client.test", ["c@defer.test"], MESSAGE)
    send(relay.port, "", ["d@bounce.test"], MESSAGE)  # from <>: no DSN
    assert untrusted(relay.port, "127.0.0.2",
                     ["MAIL FROM:<s@spammer.test>", "RCPT TO:<victim@elsewhere.test>"])[-1] == 554
    assert untrusted(relay.port, "127.0.0.2", ["MAIL FROM:<s@spammer.test> SIZE=99999999"])[-1] == 552
    assert untrusted(relay.port, "127.0.0.3", ["XYZZY"] * 20)[-1] == 421
    text = lambda: path.read_text()
    wait_until(lambda: len(re.findall(r"status=sent", text())) == 2
               and "status=deferred" in text() and "status=bounced" in text()
               and "too many errors" in text(), 30, "the day's events in the log")
    relay.stop()
    return name, path


@pytest.mark.skipif(not PFLOGSUMM, reason="needs pflogsumm (scripts/test installs it)")
def test_pflogsumm_counts_what_happened(day_of_mail):
    name, path = day_of_mail
    r = subprocess.run([PFLOGSUMM, "--syslog-name=%s" % name, str(path)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    totals = {m.group(2): int(m.group(1)) for m in
              re.finditer(r"^\s+(\d+)\s+(received|delivered|deferred|bounced|rejected)\b", r.stdout,
                          re.M)}
    assert totals == {"received": 4, "delivered": 2, "deferred": 1, "bounced": 1, "rejected": 2}, \
        r.stdout
    # Its details name the reasons as postfix's would.
    assert "Relay access denied" in r.stdout and "Message size exceeds fixed limit" in r.stdout, \
        r.stdout


@pytest.mark.skipif(not FAIL2BAN_REGEX or not os.path.exists(POSTFIX_FILTER),
                    reason="needs fail2ban (scripts/test installs it)")
def test_fail2ban_postfix_filter_matches_every_refusal_of_abuse(day_of_mail):
    """The relay-access denial and the unknown-command flood ('too many
    errors'), each with the client's address; nothing of the legitimate mail.
    With syslog_name = "postfix-smx" the stock filter as it is; with "smx",
    given the program name (docs/operation.md)."""
    name, path = day_of_mail
    flt = POSTFIX_FILTER if name == "postfix-smx" else r"postfix[_daemon=smx/\w+]"
    r = subprocess.run([FAIL2BAN_REGEX, "--print-all-matched", str(path), flt],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    m = re.search(r"^Lines: \d+ lines, \d+ ignored, (\d+) matched, \d+ missed", r.stdout, re.M)
    assert m and int(m.group(1)) == 2, r.stdout
    matched = r.stdout.split("|- Matched line(s):")[1].split("`-")[0]
    assert "Relay access denied" in matched and "127.0.0.2" in matched, matched
    assert re.search(r"too many errors after UNKNOWN from unknown\[127\.0\.0\.3\]", matched), matched


# --- journald, syslog -----------------------------------------------------

def test_under_systemd_lines_carry_their_priority_and_no_time_of_ours(sink, make_relay, tmp_path,
                                                                      monkeypatch):
    """JOURNAL_STREAM names the stream of standard error (as systemd sets it):
    each line begins with its sd-daemon(3) priority, so `journalctl -p
    warning` finds the warnings, and journald adds the time."""
    stderr = tmp_path / "smx.log"  # the relay's stderr (conftest.Relay)
    stderr.touch()
    st = os.stat(stderr)
    monkeypatch.setenv("JOURNAL_STREAM", "%d:%d" % (st.st_dev, st.st_ino))
    relay = make_relay(sink.port)
    send(relay.port, "alice@client.test", ["bob@example.net"], MESSAGE)
    wait_until(lambda: re.search(r"^<6>" + SENT, relay.log_text(), re.M), 20, "status=sent")
    os.kill(relay.child_pids("smx-smtpc")[0], signal.SIGKILL)  # a warning of smx run
    wait_until(lambda: "killed by signal 9" in relay.log_text(), 20, "the warning")
    with open(relay.config, "a") as f:
        f.write("[nonsense]\n")
    os.kill(relay.proc.pid, signal.SIGHUP)  # an error: the reload is refused
    wait_until(lambda: "<3>smx/mcp[" in relay.log_text(), 20, "the error")
    relay.stop()
    lines = relay.log_text().splitlines()
    assert all(re.match(r"<[2-7]>smx/\w+\[\d+\]: \S", l) for l in lines), lines
    assert any(re.fullmatch(r"<4>smx/mcp\[\d+\]: warning: smx-smtpc killed by signal 9; .*", l)
               for l in lines), lines
    assert any(re.fullmatch(r"<3>smx/mcp\[\d+\]: error: reload: .*", l) for l in lines), lines


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
    for proc in ("mcp", "qmgr", "smtpd", "smtp", "cleanup"):
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
        # As root, the children stay root (server.user): tmp_path is 0700.
        conf.write_text('[server]\nlisten = ["127.0.0.1:%d"]\nuser = "root"\n[queue]\nspool_dir = "%s"\n'
                        'run_dir = "%s"\n[log]\nsyslog = "%s"\n'
                        % (port, tmp_path / "spool", tmp_path / "run", path))
        r = subprocess.run([SMX, "run", "-c", str(conf)], capture_output=True, text=True,
                           timeout=30)
    assert r.returncode == 1
    # The error is on stderr too, for whoever started it.
    assert "cannot listen on 127.0.0.1:%d" % port in r.stderr
    wait_until(lambda: any("cannot listen" in d for d in read()), 10, "the error via syslog")
    got = read()
    assert any(re.fullmatch(r"<19>smx/mcp\[\d+\]: error: cannot listen on 127\.0\.0\.1:%d: .*" % port,
                            d) for d in got), got  # mail (2) * 8 + error (3)


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
    wait_until(lambda: any(re.fullmatch(r"<20>smx/\w+\[\d+\]: warning: \d+ log lines dropped: the "
                                        r"syslog socket did not take them", d)
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
    ('syslog_name = "smx mail"', "log.syslog_name: must be 1 to 64 letters"),
    ('syslog_name = ""', "log.syslog_name: must not be empty"),
])
def test_bad_log_config_is_refused(tmp_path, log, error):
    conf = tmp_path / "smx.toml"
    conf.write_text("[log]\n" + log + "\n")
    r = subprocess.run([SMX, "check-config", "-c", str(conf)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2
    assert error in r.stderr


# --- rotation ---------------------------------------------------------------

def qid_sent(text, rcpt):
    m = re.search(r"smx/qmgr\[\d+\]: ([0-9A-F]+): to=<%s>, .*status=sent" % re.escape(rcpt), text)
    return m.group(1) if m else None


@pytest.mark.parametrize("how", ["smx reload", "SIGHUP", "SIGUSR1"])
def test_after_mv_and_a_reopen_every_process_logs_to_the_new_file(sink, make_relay, tmp_path, how):
    path = tmp_path / "mail.log"
    relay = make_relay(sink.port, '[log]\nfile = "%s"' % path)
    send(relay.port, "alice@client.test", ["one@example.net"], MESSAGE)
    wait_until(lambda: qid_sent(path.read_text(), "one@example.net"), 20, "the first message")
    os.rename(path, str(path) + ".1")
    if how == "smx reload":
        relay.smx("reload")
    else:
        os.kill(relay.proc.pid, signal.SIGHUP if how == "SIGHUP" else signal.SIGUSR1)
    wait_until(lambda: path.exists() and "opened again" in path.read_text(), 10, "the new file")
    send(relay.port, "alice@client.test", ["two@example.net"], MESSAGE)
    wait_until(lambda: qid_sent(path.read_text(), "two@example.net"), 20, "the second message")
    # A child started after the rotation (kill -9, restarted by smx run)
    # logs there too: it gets smx run's pipe, never the file.
    old_smtpc = relay.child_pids("smx-smtpc")[0]
    os.kill(old_smtpc, signal.SIGKILL)
    def restarted():
        pids = relay.child_pids("smx-smtpc")  # once: it may change between two calls
        return pids and old_smtpc not in pids
    wait_until(restarted, 20, "smx-smtpc restarted")
    new_smtpc = relay.child_pids("smx-smtpc")[0]
    send(relay.port, "alice@client.test", ["three@example.net"], MESSAGE)
    wait_until(lambda: qid_sent(path.read_text(), "three@example.net"), 30, "the third message")
    wait_until(lambda: "smx/smtp[%d]: " % new_smtpc in path.read_text(), 10,
               "a line of the new smx-smtpc")
    relay.stop()
    new, old = path.read_text(), (tmp_path / "mail.log.1").read_text()
    assert qid_sent(old, "one@example.net") and not qid_sent(new, "one@example.net")
    for rcpt in ("two@example.net", "three@example.net"):
        qid = qid_sent(new, rcpt)
        assert qid and qid not in old
        # smtpd's, cleanup's and qmgr's lines of it, all in the new file.
        for prog in ("smtpd", "cleanup", "qmgr"):
            assert re.search(r"smx/%s\[\d+\]: %s: " % (prog, qid), new), (prog, new)
    assert "smx/smtp[%d]: " % new_smtpc not in old
    assert re.search(r"smx/mcp\[\d+\]: all children stopped$", new, re.M)
    assert relay.log_text() == ""


def test_logrotate_with_the_shipped_snippet(sink, make_relay, tmp_path):
    """etc/logrotate (installed as /etc/logrotate.d/smx) run by logrotate
    itself, its paths moved into the test's directory."""
    logrotate = shutil.which("logrotate") or "/usr/sbin/logrotate"
    if not os.path.exists(logrotate):
        pytest.skip("needs logrotate (scripts/test installs it)")
    logdir = tmp_path / "log"
    logdir.mkdir()
    path = logdir / "smx.log"
    relay = make_relay(sink.port, '[log]\nfile = "%s"' % path)
    send(relay.port, "alice@client.test", ["one@example.net"], MESSAGE)
    wait_until(lambda: qid_sent(path.read_text(), "one@example.net"), 20, "the first message")
    with open(os.path.join(REPO, "etc", "logrotate")) as f:
        snippet = f.read()
    assert "/var/log/smx/*.log" in snippet and "/run/smx/smx.pid" in snippet
    snippet = snippet.replace("/var/log/smx/*.log", str(logdir / "*.log"))
    snippet = snippet.replace("/run/smx/smx.pid", os.path.join(relay.run_dir, "smx.pid"))
    # Not root's group adm on every machine: the test's own group.
    snippet = re.sub(r"create 0640 root adm", "create 0640 root %d" % os.getgid(), snippet)
    conf = tmp_path / "logrotate.conf"
    conf.write_text(snippet)
    r = subprocess.run([logrotate, "-f", "-s", str(tmp_path / "state"), str(conf)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (logdir / "smx.log.1").exists()  # delaycompress: the first one stays plain
    wait_until(lambda: "opened again" in path.read_text(), 10, "smx run to open the new file")
    send(relay.port, "alice@client.test", ["two@example.net"], MESSAGE)
    wait_until(lambda: qid_sent(path.read_text(), "two@example.net"), 20, "the second message")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    assert qid_sent((logdir / "smx.log.1").read_text(), "one@example.net")


def test_children_of_other_accounts_hold_a_pipe_not_the_file(sink, make_relay, open_dir, accounts):
    """Started as root: the file is root's, 0640; no child has it open (they
    write to smx run's pipe), so none can truncate or replace it."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the children run as smxs, smxq, smxc")
    path = os.path.join(open_dir, "mail.log")
    relay = make_relay(sink.port, '[log]\nfile = "%s"' % path, tmp=open_dir, separate_users=True)
    send(relay.port, "alice@client.test", ["bob@example.net"], MESSAGE)
    wait_until(lambda: re.search(SENT, open(path).read()), 20, "status=sent in the file")
    st = os.stat(path)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o640)
    for name in ("smx-qmgr", "smx-smtps", "smx-smtpc"):
        pid = relay.child_pids(name)[0]
        fds = os.path.join("/proc/%d/fd" % pid)
        targets = [os.readlink(os.path.join(fds, fd)) for fd in os.listdir(fds)]
        assert path not in targets, (name, targets)
        assert any(t.startswith("pipe:") for t in targets), (name, targets)
