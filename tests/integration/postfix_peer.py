"""A private postfix instance for the tests: its own config, queue and data
directories under /tmp, a certificate made with openssl, 127.0.0.1 on a
given port, its log in its directory; started with `postfix start` and
stopped by its master's PID (as perf/peers/postfix.sh runs one). Needs root
(postfix's daemons drop to its own accounts) and the Debian postfix package.
The AUTH peer (postfix_auth_peer.py) and the DSN next hop
(test_dsn_postfix.py) add their main.cf lines and files."""
import os
import shutil
import signal
import smtplib
import subprocess
import tempfile
import time

from conftest import wait_until

# What every instance has; the caller's lines follow.
MAIN_CF = """\
compatibility_level = 3.6
config_directory = {dir}/etc
queue_directory = {dir}/spool
data_directory = {dir}/data
mail_owner = postfix
setgid_group = postdrop
inet_interfaces = 127.0.0.1
inet_protocols = ipv4
mydestination =
local_recipient_maps =
alias_maps =
alias_database =
maillog_file_prefixes = {dir}
maillog_file = {dir}/maillog
"""

# Lines of an instance that relays mail from 127.0.0.0/8 to the sink on
# port {sink} (str.format).
RELAY_TO_SINK_CF = """\
mynetworks = 127.0.0.0/8
smtpd_relay_restrictions = permit_mynetworks, reject_unauth_destination
relayhost = [127.0.0.1]:{sink}
"""

# No chroot: the queue directory is not laid out as a chroot jail.
MASTER_CF = """\
127.0.0.1:{port} inet n - n - - smtpd
pickup    unix  n       -       n       60      1       pickup
cleanup   unix  n       -       n       -       0       cleanup
qmgr      unix  n       -       n       300     1       qmgr
rewrite   unix  -       -       n       -       -       trivial-rewrite
bounce    unix  -       -       n       -       0       bounce
defer     unix  -       -       n       -       0       bounce
trace     unix  -       -       n       -       0       bounce
verify    unix  -       -       n       -       1       verify
flush     unix  n       -       n       1000?   0       flush
proxymap  unix  -       -       n       -       -       proxymap
smtp      unix  -       -       n       -       -       smtp
relay     unix  -       -       n       -       -       smtp
showq     unix  n       -       n       -       -       showq
error     unix  -       -       n       -       -       error
retry     unix  -       -       n       -       -       error
discard   unix  -       -       n       -       -       discard
anvil     unix  -       -       n       -       1       anvil
scache    unix  -       -       n       -       1       scache
postlog   unix-dgram n  -       n       -       1       postlogd
tlsmgr    unix  -       -       n       1000?   1       tlsmgr
"""


class PrivatePostfix:
    """main_cf: the instance's own main.cf lines ({dir} is its directory);
    prepare(dir): writes what else it needs before postfix starts."""

    def __init__(self, port, name, main_cf, prepare=None):
        # Under /tmp, not pytest's 0700 directories: postfix's daemons drop
        # to the postfix user and must reach their queue.
        self.dir = tempfile.mkdtemp(prefix="smx-postfix-%s-" % name, dir="/tmp")
        os.chmod(self.dir, 0o755)
        self.port = port
        self.pid_file = os.path.join(self.dir, "spool", "pid", "master.pid")
        try:
            self._start(name, main_cf, prepare)
        except BaseException:
            self.stop()  # whatever started, stopped by its PID; the directory goes
            raise

    def _start(self, name, main_cf, prepare):
        d = self.dir
        for sub in ("etc", "spool", "data"):
            os.mkdir(os.path.join(d, sub))
        shutil.chown(os.path.join(d, "data"), "postfix")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-subj", "/CN=%s.test" % name, "-keyout", d + "/key.pem",
                        "-out", d + "/cert.pem"], check=True, capture_output=True, timeout=60)
        with open(d + "/etc/main.cf", "w") as f:
            f.write(MAIN_CF.format(dir=d) + main_cf.format(dir=d))
        with open(d + "/etc/master.cf", "w") as f:
            f.write(MASTER_CF.format(port=self.port))
        if prepare:
            prepare(d)
        etc = d + "/etc"
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
