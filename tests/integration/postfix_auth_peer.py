"""A private postfix smtpd with Cyrus SASL (sasldb, PLAIN and LOGIN) as the
smart host of the AUTH tests: it relays only for clients that authenticated,
to a test sink. Needs root and the Debian packages postfix, sasl2-bin and
libsasl2-modules; the tests skip without them."""
import os
import shutil
import subprocess
import tempfile
import time

MAIN_CF = """\
compatibility_level = 3.6
config_directory = {dir}/etc
queue_directory = {dir}/spool
data_directory = {dir}/data
mail_owner = postfix
setgid_group = postdrop
inet_interfaces = 127.0.0.1
inet_protocols = ipv4
myhostname = auth-postfix.test
mydestination =
local_recipient_maps =
alias_maps =
alias_database =
mynetworks =
smtpd_relay_restrictions = permit_sasl_authenticated, reject
relayhost = [127.0.0.1]:{sink_port}
smtp_tls_security_level = none
maillog_file = {dir}/maillog
maillog_file_prefixes = {dir}
smtpd_sasl_auth_enable = yes
smtpd_sasl_type = cyrus
smtpd_sasl_path = smtpd
cyrus_sasl_config_path = {dir}/etc/sasl
smtpd_sasl_local_domain = auth.test
{tls}
"""

TLS = """\
smtpd_tls_security_level = may
smtpd_tls_cert_file = {dir}/cert.pem
smtpd_tls_key_file = {dir}/key.pem
smtpd_tls_auth_only = yes
"""

# No chroot: the queue directory is not laid out as a chroot jail. Shared by
# every private postfix the tests start (test_dsn_postfix.py too).
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


def available():
    return (os.geteuid() == 0 and shutil.which("postfix") and shutil.which("saslpasswd2")
            and os.path.exists("/usr/lib/x86_64-linux-gnu/sasl2/libsasldb.so.2"))


class PostfixAuthPeer:
    """Postfix on 127.0.0.1:port; `tls`: offers STARTTLS and AUTH only after
    it; else AUTH in plaintext and no STARTTLS (what smx must not use)."""

    def __init__(self, port, sink_port, users, tls=True, mechs="PLAIN LOGIN"):
        # Not under pytest's 0700 tmp: the postfix account must reach it.
        self.dir = tempfile.mkdtemp(prefix="smx-postfix-auth-")
        os.chmod(self.dir, 0o755)
        self.port = port
        d = self.dir
        # Debian's postfix reads CONFIG_DIRECTORY/sasl/smtpd.conf.
        for sub in ("etc", "spool", "data", "etc/sasl"):
            os.mkdir(os.path.join(d, sub))
        shutil.chown(os.path.join(d, "data"), "postfix")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-subj", "/CN=auth-postfix.test", "-keyout", d + "/key.pem",
                        "-out", d + "/cert.pem"], check=True, capture_output=True, timeout=60)
        with open(d + "/etc/main.cf", "w") as f:
            f.write(MAIN_CF.format(dir=d, sink_port=sink_port,
                                   tls=TLS.format(dir=d) if tls else ""))
        with open(d + "/etc/master.cf", "w") as f:
            f.write(MASTER_CF.format(port=port))
        with open(d + "/etc/sasl/smtpd.conf", "w") as f:
            f.write("pwcheck_method: auxprop\nauxprop_plugin: sasldb\n"
                    "sasldb_path: %s/sasldb2\nmech_list: %s\n" % (d, mechs))
        for user, password in users.items():
            subprocess.run(["saslpasswd2", "-f", d + "/sasldb2", "-c", "-p", "-u", "auth.test",
                            user], input=password.encode(), check=True, timeout=30)
        shutil.chown(d + "/sasldb2", "postfix")
        os.chmod(d + "/sasldb2", 0o600)
        subprocess.run(["postfix", "-c", d + "/etc", "set-permissions"], capture_output=True,
                       timeout=60)
        subprocess.run(["postfix", "-c", d + "/etc", "check"], check=True, timeout=60)
        subprocess.run(["postfix", "-c", d + "/etc", "start"], check=True, capture_output=True,
                       timeout=60)
        self.master_pid = None
        deadline = time.time() + 20
        while time.time() < deadline and self.master_pid is None:
            try:
                with open(d + "/spool/pid/master.pid") as f:
                    self.master_pid = int(f.read().strip())
            except (OSError, ValueError):
                time.sleep(0.1)
        assert self.master_pid, "postfix did not start"

    def log(self):
        try:
            with open(self.dir + "/maillog", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stop(self):
        subprocess.run(["postfix", "-c", self.dir + "/etc", "stop"], capture_output=True,
                       timeout=60)
        # postfix stop returns before the master is gone.
        deadline = time.time() + 10
        while self.master_pid and time.time() < deadline:
            try:
                os.kill(self.master_pid, 0)
                time.sleep(0.1)
            except ProcessLookupError:
                break
        shutil.rmtree(self.dir, ignore_errors=True)
