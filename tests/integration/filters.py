"""The real mail filters (milters) as test fixtures: OpenDKIM signing, rspamd
in milter mode, SpamAssassin's spamd behind spamass-milter, and smx's null
milter (perf/null-milter.c on libmilter). Each runs in a directory of its
own under /tmp (0755: rspamd and spamd drop to their accounts and must
reach it) with its own config files, pid file and log, on a free port of
127.0.0.1; nothing of the system's instances or of /etc is used or changed
(the Debian packages may start their own services on their default ports:
ours never take those). Each is stopped by its PID, its directory removed.

    with OpenDkim() as dkim:          # dkim.socket: "inet:127.0.0.1:PORT"
        ...                           # dkim.verify(message) -> dkimpy's verdict

relay-bench's milter axis (perf/lib/smxbench/milter.py) starts the same
classes; preexec runs in each daemon's first process (its cgroup)."""
import os
import shutil
import signal
import socket
import subprocess
import tempfile

from conftest import BUILD, free_port, wait_until

# The GTUBE test string (SpamAssassin's and rspamd's "this is spam").
GTUBE = "XJS*C4JDBQADN1.NSBN3*2IDNEN*GTUBE-STANDARD-ANTI-UBE-TEST-EMAIL*C.34X"
NULL_MILTER = os.path.join(BUILD, "perf", "smx-null-milter")


def listening(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


class Filter:
    """One daemon in the foreground under its own directory. Subclasses
    write their files in prepare() and name the command in command()."""
    name = "?"
    startup_timeout = 30  # seconds from exec to listening

    def __init__(self, preexec=None, port=None):
        """port: the one to listen on (a restarted filter keeps its
        predecessor's, which its MTA's config names), else a free one."""
        self.dir = tempfile.mkdtemp(prefix="smx-%s-" % self.name, dir="/tmp")
        os.chmod(self.dir, 0o755)
        self.port = port or free_port()
        self.socket = "inet:127.0.0.1:%d" % self.port
        self.preexec = preexec
        self.proc = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def start(self):
        try:
            self.prepare()
            with open(self.path("output.log"), "ab") as out:
                self.proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, cwd=self.dir,
                                             preexec_fn=self.preexec)
            wait_until(self.ready, self.startup_timeout, "%s to listen on port %d" % (self.name, self.port))
        except AssertionError as e:
            log = self.log()
            self.stop()
            raise AssertionError("%s; its log ends:\n%s" % (e, log[-4000:])) from None
        except BaseException:
            self.stop()
            raise
        return self

    def ready(self):
        if self.proc.poll() is not None:
            raise AssertionError("%s exited with %s" % (self.name, self.proc.returncode))
        return listening(self.port)

    def log(self):
        text = ""
        for name in ("output.log", self.name + ".log"):
            try:
                with open(self.path(name), errors="replace") as f:
                    text += f.read()
            except OSError:
                pass
        return text

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def prepare(self):
        pass


# dkimpy (Debian's python3-dkim, for Debian's python3) verifies with the
# public key given, not the system resolver: argv[1] is the selector's TXT
# record, the message comes on stdin.
VERIFY = """
import sys, dkim
record = sys.argv[1].encode()
ok = dkim.verify(sys.stdin.buffer.read(), dnsfunc=lambda name, timeout=5: record)
sys.exit(0 if ok else 1)
"""


class OpenDkim(Filter):
    """OpenDKIM signing (Mode s) mail from internal (its InternalHosts: the
    relay's client addresses) whose From: is in domain, with a 2048-bit key
    made by opendkim-genkey for selector."""
    name = "opendkim"

    def __init__(self, domain="example.test", selector="sel", internal="127.0.0.1", **kw):
        super().__init__(**kw)
        self.domain, self.selector, self.internal = domain, selector, internal

    def prepare(self):
        subprocess.run(["opendkim-genkey", "--bits=2048", "--directory=" + self.dir, "--domain=" + self.domain,
                        "--selector=" + self.selector], check=True, capture_output=True, timeout=60)
        with open(self.path("opendkim.conf"), "w") as f:
            f.write("Syslog no\n"
                    "Mode s\n"
                    "Domain %s\n"
                    "Selector %s\n"
                    "KeyFile %s\n"
                    # The key is root's, 0600; /tmp above it is world-writable.
                    "RequireSafeKeys false\n"
                    "InternalHosts %s\n"
                    "Canonicalization relaxed/simple\n"
                    "Socket inet:%d@127.0.0.1\n"
                    "PidFile %s\n" % (self.domain, self.selector, self.path(self.selector + ".private"),
                                      self.internal, self.port, self.path("opendkim.pid")))

    def command(self):
        return ["opendkim", "-f", "-x", self.path("opendkim.conf")]

    def record(self):
        """The TXT record opendkim-genkey wrote for selector._domainkey.domain."""
        with open(self.path(self.selector + ".txt")) as f:
            text = f.read()
        return "".join(part for part in text.split('"')[1::2])

    def verify(self, message):
        """dkimpy's verdict on message (bytes, as the sink got it): True when
        its first DKIM-Signature verifies with our key."""
        r = subprocess.run(["/usr/bin/python3", "-c", VERIFY, self.record()], input=message,
                           capture_output=True, timeout=60)
        if r.returncode not in (0, 1):
            raise AssertionError("dkimpy failed: %s" % r.stderr.decode(errors="replace"))
        return r.returncode == 0


class Rspamd(Filter):
    """rspamd 3 with the Debian package's rules and modules ($CONFDIR, read
    only) and a config of ours: one proxy worker in milter mode that scans
    by itself (a self_scan upstream: no normal worker, no controller), its database,
    run and log directories here, extended spam headers on, and a DNS
    server that refuses at once (a closed port of 127.0.0.1) so that
    network checks fail fast. The modules that need Redis disable
    themselves (no Redis configured). Loading the rules takes several
    seconds."""
    name = "rspamd"
    startup_timeout = 90
    user = "_rspamd"

    def prepare(self):
        for sub in ("db", "run", "log", "local.d"):
            os.mkdir(self.path(sub))
            shutil.chown(self.path(sub), self.user, self.user)
        # As the package's rspamd.conf, our keys merged over its options.
        with open(self.path("rspamd.conf"), "w") as f:
            f.write(""".include "$CONFDIR/common.conf"
options {
    pidfile = "$RUNDIR/rspamd.pid";
    .include "$CONFDIR/options.inc"
    .include(priority=1,duplicate=merge) "$LOCAL_CONFDIR/local.d/options.inc"
}
logging { type = "file"; filename = "$LOGDIR/rspamd.log"; level = "info"; }
worker "rspamd_proxy" {
    bind_socket = "127.0.0.1:%d";
    milter = yes;
    timeout = 120s;
    count = 1;
    upstream "local" { default = yes; self_scan = yes; }
    spam_header = "X-Spam";
    reject_message = "Spam message rejected";
}
""" % self.port)
        with open(self.path("local.d", "options.inc"), "w") as f:
            f.write('dns { nameserver = ["127.0.0.1:%d"]; timeout = 0.2s; retransmits = 1; }\n' % free_port())
        with open(self.path("local.d", "milter_headers.conf"), "w") as f:
            # The tests' clients are local (127.0.0.1): headers for them too.
            f.write("extended_spam_headers = true;\nskip_local = false;\nskip_authenticated = false;\n")

    def command(self):
        v = ["--var=%s=%s" % (var, self.path(sub)) for var, sub in
             (("DBDIR", "db"), ("RUNDIR", "run"), ("LOGDIR", "log"), ("LOCAL_CONFDIR", "."))]
        return ["rspamd", "-f", "-c", self.path("rspamd.conf"), "-u", self.user, "-g", self.user] + v

    def log(self):
        text = super().log()
        try:
            with open(self.path("log", "rspamd.log"), errors="replace") as f:
                return text + f.read()
        except OSError:
            return text


class Spamd(Filter):
    """SpamAssassin's spamd with the rules the Debian package ships
    (/usr/share/spamassassin: GTUBE is there, no sa-update needed), the
    plugin loaders (*.pre) of /etc/spamassassin copied, a local.cf of
    ours, local tests only (-L: no DNS, no network), no user configs,
    running as debian-spamd with a home here."""
    name = "spamd"
    startup_timeout = 90
    user = "debian-spamd"

    def prepare(self):
        site, home = self.path("site"), self.path("home")
        os.mkdir(site)
        os.mkdir(home)
        shutil.chown(home, self.user, self.user)
        for name in os.listdir("/etc/spamassassin"):
            if name.endswith(".pre"):
                shutil.copy(os.path.join("/etc/spamassassin", name), site)
        with open(os.path.join(site, "local.cf"), "w") as f:
            f.write("required_score 5.0\nreport_safe 0\nuse_bayes 0\nbayes_auto_learn 0\n")

    def command(self):
        return ["spamd", "-L", "-x", "-4", "--listen=127.0.0.1:%d" % self.port, "--allowed-ips=127.0.0.1",
                "--username=" + self.user, "--helper-home-dir=" + self.path("home"),
                "--configpath=/usr/share/spamassassin", "--siteconfigpath=" + self.path("site"),
                "--max-children=2", "--pidfile=" + self.path("spamd.pid"),
                "--syslog=" + self.path("spamd.log")]


class SpamassMilter(Filter):
    """spamass-milter in front of a Spamd: reject_score set, a message
    scoring that much is refused (its -r); None, spam is only tagged
    (X-Spam-* headers). Checks mail from every client (no -i)."""
    name = "spamass-milter"

    def __init__(self, spamd, reject_score=None, **kw):
        super().__init__(**kw)
        self.spamd, self.reject_score = spamd, reject_score

    def command(self):
        reject = ["-r", str(self.reject_score)] if self.reject_score is not None else []
        return (["spamass-milter", "-p", "inet:%d@127.0.0.1" % self.port, "-P", self.path("pid")] + reject
                + ["--", "-d", "127.0.0.1", "-p", str(self.spamd.port)])


class NullMilter(Filter):
    """perf/null-milter.c: continues at every stage; header ("Name: value"),
    if given, is added to every message at its end."""
    name = "null-milter"

    def __init__(self, header=None, binary=NULL_MILTER, **kw):
        super().__init__(**kw)
        self.header, self.binary = header, binary

    def command(self):
        return [self.binary, "-p", "inet:%d@127.0.0.1" % self.port] + (["-a", self.header] if self.header else [])
