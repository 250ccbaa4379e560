"""A private postfix smtpd with Cyrus SASL (sasldb, PLAIN and LOGIN) as the
smart host of the AUTH tests: it relays only for clients that authenticated,
to a test sink. Needs root and the Debian packages postfix, sasl2-bin and
libsasl2-modules; the tests skip without them."""
import os
import shutil
import subprocess

from postfix_peer import PrivatePostfix

MAIN_CF = """\
myhostname = auth-postfix.test
mynetworks =
smtpd_relay_restrictions = permit_sasl_authenticated, reject
relayhost = [127.0.0.1]:{sink_port}
smtp_tls_security_level = none
smtpd_sasl_auth_enable = yes
smtpd_sasl_type = cyrus
smtpd_sasl_path = smtpd
cyrus_sasl_config_path = {{dir}}/etc/sasl
smtpd_sasl_local_domain = auth.test
{tls}"""

TLS = """\
smtpd_tls_security_level = may
smtpd_tls_cert_file = {dir}/cert.pem
smtpd_tls_key_file = {dir}/key.pem
smtpd_tls_auth_only = yes
"""


def available():
    return (os.geteuid() == 0 and shutil.which("postfix") and shutil.which("saslpasswd2")
            and os.path.exists("/usr/lib/x86_64-linux-gnu/sasl2/libsasldb.so.2"))


class PostfixAuthPeer(PrivatePostfix):
    """Postfix on 127.0.0.1:port; `tls`: offers STARTTLS and AUTH only after
    it; else AUTH in plaintext and no STARTTLS (what smx must not use)."""

    def __init__(self, port, sink_port, users, tls=True, mechs="PLAIN LOGIN"):
        def sasl(d):
            # Debian's postfix reads CONFIG_DIRECTORY/sasl/smtpd.conf.
            os.mkdir(d + "/etc/sasl")
            with open(d + "/etc/sasl/smtpd.conf", "w") as f:
                f.write("pwcheck_method: auxprop\nauxprop_plugin: sasldb\n"
                        "sasldb_path: %s/sasldb2\nmech_list: %s\n" % (d, mechs))
            for user, password in users.items():
                subprocess.run(["saslpasswd2", "-f", d + "/sasldb2", "-c", "-p", "-u", "auth.test",
                                user], input=password.encode(), check=True, timeout=30)
            shutil.chown(d + "/sasldb2", "postfix")
            os.chmod(d + "/sasldb2", 0o600)

        main_cf = MAIN_CF.format(sink_port=sink_port,
                                 tls=TLS if tls else "")
        super().__init__(port, "auth", main_cf, sasl)
