"""Fixtures that start the real smx processes and a recording sink on 127.0.0.1."""
import json
import os
import pwd
import resource
import re
import shutil
import signal
import smtplib
import socket
import subprocess
import sys
import tempfile
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("SMX_BUILD", os.path.join(REPO, "build"))
SMX = os.path.join(BUILD, "mcp", "smx")
# The record protocol's version a peer's HELLO must carry, as smx is built
# with it (libsm/messages.hpp), for the tests that speak it raw.
with open(os.path.join(REPO, "libsm", "messages.hpp")) as _f:
    PROTOCOL_VERSION = int(re.search(r"protocol_version = (\d+);", _f.read()).group(1))
HERE = os.path.dirname(os.path.abspath(__file__))
# Fewer messages in the slower sanitizer build (scripts/test sets it).
SCALE = float(os.environ.get("SMX_TEST_SCALE", "1"))
# The packaging tests check the tree, the install step and the package, not
# the code the build under test runs: scripts/test runs them once, with the
# normal build, and reports them skipped in the sanitizer build's run.
# test_first_run builds a clone of the tree with scripts/run, whatever the
# build under test; test_filters_postfix runs no smx at all (postfix as the
# host of the real milters, the proof of the fixtures).
PACKAGING_MODULES = {"test_deb", "test_install", "test_service", "test_manual", "test_first_run",
                     "test_filters_postfix"}


def _sanitized():
    try:
        with open(os.path.join(BUILD, "meson-info", "intro-buildoptions.json")) as f:
            opts = json.load(f)
    except OSError:
        return False
    return any(o["name"] == "b_sanitize" and o["value"] != "none" for o in opts)


# The build under test has AddressSanitizer/UBSan (scripts/test's second run).
SANITIZED = _sanitized()


def pytest_collection_modifyitems(config, items):
    if os.environ.get("SMX_PACKAGING_TESTS", "1") != "0":
        return
    skip = pytest.mark.skip(reason="packaging and postfix-only tests run once, in the normal "
                                   "build's run (SMX_PACKAGING_TESTS=0)")
    for item in items:
        if item.module.__name__.rsplit(".", 1)[-1] in PACKAGING_MODULES:
            item.add_marker(skip)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _crc32c_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


_CRC32C = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC32C[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def segment_records(content_dir):
    """The whole records in the content segments under content_dir
    (libsm/content_segment.hpp: 40-byte header of magic, size, CRC32C, the
    transaction id; then the data): {ta id: data}. A record cut short or
    with a wrong CRC is not whole and not listed. Places are reserved in
    order but written by several sessions, so a whole record may follow one
    that a full disk cut short, or a place never written (a hole): the walk
    goes on at the next magic after such a spot."""
    magic = b"SMXSEG1\n"
    out = {}
    seg_dir = os.path.join(content_dir, "segments")
    for name in sorted(os.listdir(seg_dir)) if os.path.isdir(seg_dir) else []:
        with open(os.path.join(seg_dir, name), "rb") as f:
            data = f.read()
        off = data.find(magic)
        while 0 <= off and off + 40 <= len(data):
            size = int.from_bytes(data[off + 8:off + 16], "little")
            crc = int.from_bytes(data[off + 16:off + 20], "little")
            body = data[off + 40:off + 40 + size]
            if len(body) == size and crc32c(body) == crc:
                out[data[off + 23:off + 40].decode()] = body
                off = data.find(magic, off + 40 + size)
            else:
                off = data.find(magic, off + 1)
    return out


def content_files(content_dir):
    """Content files (not segments) under content_dir, .tmp ones included."""
    found = []
    for d, _, files in os.walk(content_dir):
        found += [os.path.join(d, f) for f in files if not f.endswith(".seg")]
    return found


def local_client():
    """How smx names a client at 127.0.0.1 in its logs (policy.client_name_lookup):
    the hosts file's name for it, confirmed by that name's addresses."""
    try:
        name = socket.gethostbyaddr("127.0.0.1")[0].lower()
        if "127.0.0.1" in socket.gethostbyname_ex(name)[2]:
            return name + "[127.0.0.1]"
    except OSError:
        pass
    return "unknown[127.0.0.1]"


def wait_until(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("timed out after %ss waiting for %s" % (timeout, what))


class SinkDidNotStart(Exception):
    pass


class Sink:
    """tests/integration/sink.py (or another script that records messages the
    same way, such as hostile_nexthop.py) in its own process."""

    def __init__(self, tmp, *args, script="sink.py", sub="sink"):
        self.dir = os.path.join(tmp, sub)
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, script),
                                      "--dir", self.dir, *args],
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line:  # it exited: the address was taken (the traceback is on stderr)
            self.proc.wait(10)
            raise SinkDidNotStart("%s %s exited with %s" % (script, " ".join(args),
                                                              self.proc.returncode))
        self.port = int(line)

    def messages(self, head=-1):
        """Envelope dicts with the data (only its first `head` bytes if given: a
        long run re-reads thousands of files), the file name (n.msg, n counts
        up) and the file's mtime (when the sink took the message)."""
        out = []
        for name in os.listdir(self.dir):
            if not name.endswith(".msg"):
                continue
            with open(os.path.join(self.dir, name), "rb") as f:
                env = json.loads(f.readline())
                env["data"] = f.read(head)
                env["name"] = name
                env["mtime"] = os.fstat(f.fileno()).st_mtime
                out.append(env)
        return out

    def count(self):
        return sum(1 for n in os.listdir(self.dir) if n.endswith(".msg"))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Raw:
    """A byte-level SMTP client for what smtplib will not send; source: the
    local address to connect from (127.0.0.2: a client outside
    relay_networks = ["127.0.0.1/32"]); greet=False leaves the greeting unread."""

    def __init__(self, port, source=None, greet=True):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=10,
                                          source_address=(source, 0) if source else None)
        self.buf = b""
        self.greeting = self.reply() if greet else None

    def send(self, data):
        self.s.sendall(data)

    def reply(self):
        """One complete (multi-line) reply as text."""
        lines = []
        while True:
            while b"\r\n" not in self.buf:
                chunk = self.s.recv(65536)
                if not chunk:
                    return "\n".join(lines) if lines else "<closed>"
                self.buf += chunk
            line, self.buf = self.buf.split(b"\r\n", 1)
            lines.append(line.decode())
            if len(line) < 4 or line[3:4] == b" ":
                return "\n".join(lines)

    def cmd(self, line):
        self.send(line.encode() + b"\r\n")
        return self.reply()

    def close(self):
        self.s.close()


class Relay:
    """`smx run` with a private config, spool and run directory.

    Run as root, the children would each get their own account, which cannot
    enter pytest's 0700 tmp directories: unless separate_users is set (and
    tmp is a directory they can reach: test_privsep.py), they all stay root
    through `[server] user`, as they would all run as an ordinary user."""

    def __init__(self, tmp, sink_port, extra="", separate_users=False, routes=True, nofile=None):
        self.tmp = tmp
        self.nofile = nofile  # RLIMIT_NOFILE (soft and hard) of smx run and its children
        self.port = free_port()
        self.spool = os.path.join(tmp, "spool")
        self.run_dir = os.path.join(tmp, "run")
        self.config = os.path.join(tmp, "smx.toml")
        self.log_path = os.path.join(tmp, "smx.log")
        self.one_user = os.geteuid() == 0 and not separate_users
        with open(self.config, "w") as f:
            f.write(self.config_text(sink_port, extra, routes))
        self.proc = None

    def config_text(self, sink_port, extra, routes=True):
        # extra may add keys; sections named in it are merged by the caller.
        # routes=False: no [routes] table at all (delivery by MX).
        sections = {
            "server": {"listen": '["127.0.0.1:%d"]' % self.port, "hostname": '"smx.test"'},
            "queue": {"spool_dir": '"%s"' % self.spool, "run_dir": '"%s"' % self.run_dir,
                      "retry_min": "1", "retry_max": "2",
                      # Content segments go 6 s after their last message is
                      # done (30 s by default), so "an empty spool" comes soon.
                      "test_segment_age": "6"},
            "client": {"idle_timeout": "2"},
            "routes": {"default": '"[127.0.0.1]:%d"' % sink_port},
        }
        if not routes:
            del sections["routes"]
        if self.one_user:
            sections["server"]["user"] = '"root"'
        section = None
        for line in extra.strip().splitlines():
            line = line.strip()
            if line.startswith("["):
                section = line.strip("[]")
                sections.setdefault(section, {})
            elif line:
                k, v = line.split("=", 1)
                sections[section][k.strip()] = v.strip()
        text = ""
        for name, kv in sections.items():
            text += "[%s]\n" % name
            text += "".join("%s = %s\n" % (k, v) for k, v in kv.items())
        return text

    def start(self):
        self.log = open(self.log_path, "ab")
        limit = self.nofile
        self.proc = subprocess.Popen(
            [SMX, "run", "-c", self.config], stdout=self.log, stderr=subprocess.STDOUT,
            preexec_fn=(lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit)))
            if limit else None)
        wait_until(self.greets, 20, "smx to answer on port %d" % self.port)
        return self

    def greets(self):
        if self.proc.poll() is not None:
            raise AssertionError("smx run exited with %s; log:\n%s" % (self.proc.returncode,
                                                                      self.log_text()))
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
                return s.recv(512).startswith(b"220")
        except OSError:
            return False

    def stop(self, timeout=5):
        """SIGTERM; returns seconds taken. Fails the test if it takes longer."""
        if not self.proc or self.proc.poll() is not None:
            return 0
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout + 5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("smx run did not stop on SIGTERM")
        return time.monotonic() - t0

    def smx(self, *args, check=True):
        r = subprocess.run([SMX, *args, "-c", self.config], capture_output=True, text=True,
                           timeout=30)
        if check and r.returncode != 0:
            raise AssertionError("smx %s failed (%d): %s" % (args, r.returncode, r.stderr))
        return r

    def stats(self):
        return json.loads(self.smx("stats", "--json").stdout)

    def child_pids(self, name):
        """PIDs of children of our smx run whose command is `name`."""
        out = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % pid) as f:
                    st = f.read()
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    cmd = f.read().split(b"\0")[0].decode()
            except OSError:
                continue
            ppid = int(st.rsplit(")", 1)[1].split()[1])
            if ppid == self.proc.pid and os.path.basename(cmd) == name:
                out.append(int(pid))
        return out

    def spool_files(self, sub):
        root = os.path.join(self.spool, sub)
        found = []
        for d, _, files in os.walk(root):
            found += [os.path.join(d, f) for f in files]
        return found

    def wait_probes_ended(self):
        """Waits until the start-up probes' sessions (ours in start(), the
        MCP's readiness probe) have ended: until then they hold a
        connection slot, and a per-client one, of the process they landed on."""
        wait_until(lambda: "ready: smx-smtps answers" in self.log_text(), 10, "the MCP's probe")

        def ended():
            log = self.log_text()
            return len(re.findall(r"\bconnect from", log)) == log.count("disconnect from")
        wait_until(ended, 10, "the probes' sessions to end")

    def log_text(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def log_matching(self, *patterns, timeout=10):
        """The log once every regular expression of patterns is found in it
        (the children's lines reach the file through the MCP a moment after
        what they tell of)."""
        return wait_until(lambda: (lambda t: t if all(re.search(p, t) for p in patterns) else None)(
            self.log_text()), timeout, "the log lines %s" % (patterns,))


@pytest.fixture
def sink(tmp_path):
    s = Sink(str(tmp_path))
    yield s
    s.stop()


@pytest.fixture
def make_sink(tmp_path):
    made = []

    def make(*args, sub="sink"):
        s = Sink(str(tmp_path / sub), *args)
        made.append(s)
        return s
    yield make
    for s in made:
        s.stop()


@pytest.fixture
def open_dir():
    """A directory every account may enter, for a relay whose children run
    as smxs/smxq/smxc (pytest's tmp_path is 0700); removed afterwards."""
    d = tempfile.mkdtemp(prefix="smx-privsep-", dir="/tmp")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def accounts():
    """The children's accounts, made by the install step as CI would: {name: uid}."""
    subprocess.run(["bash", "-c", ". '%s/scripts/lib/setup.sh' && smx_add_users" % REPO],
                   check=True)
    return {u: pwd.getpwnam(u).pw_uid for u in ("smxs", "smxq", "smxc")}


@pytest.fixture
def make_relay(tmp_path):
    made = []

    def make(sink_port, extra="", start=True, tmp=None, separate_users=False, routes=True,
             nofile=None):
        r = Relay(tmp or str(tmp_path), sink_port, extra, separate_users, routes, nofile)
        made.append(r)
        return r.start() if start else r
    yield make
    for r in made:
        try:
            r.stop()
        except AssertionError:
            pass


def strip_received(data):
    """The message without the first header field (our Received:), and that field."""
    assert data.startswith(b"Received: "), data[:200]
    end = 0
    while True:
        nl = data.index(b"\r\n", end)
        end = nl + 2
        if data[end:end + 1] not in (b" ", b"\t"):
            return data[end:], data[:end]


def send(port, sender, rcpts, body, timeout=60):
    with smtplib.SMTP("127.0.0.1", port, timeout=timeout) as c:
        c.ehlo("client.test")
        c.sendmail(sender, rcpts, body)
