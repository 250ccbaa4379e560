"""`smx config [-n|-d] [KEY...]` as postconf, and check-config refusing what
`smx run` would refuse and warning about what it accepts but should not
(issues 26 and 27)."""
import os
import re
import subprocess

import pytest

from conftest import SMX, free_port, wait_until
from test_privsep import as_user, root_only

LINE = re.compile(r'^(server|queue|client|log|stats|policy|dnsbl|anvil|rewrite|milter|routes|tls_policy)\.[\w".-]+ = \S.*$')


def smx(*args):
    return subprocess.run([SMX, *args], capture_output=True, text=True, timeout=30)


def test_config_prints_every_key_as_a_config_file(tmp_path):
    r = smx("config", "-c", "")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) > 70
    assert all(LINE.match(l) for l in lines), [l for l in lines if not LINE.match(l)]
    assert 'server.listen = ["127.0.0.1:2525"]' in lines
    assert "queue.retry_min = 300" in lines
    assert 'routes.default = "mx"' in lines
    # Its output is a config file that reads back as the same.
    again = tmp_path / "again.toml"
    again.write_text(r.stdout)
    assert smx("config", "-c", str(again)).stdout == r.stdout
    assert smx("check-config", "-c", str(again)).returncode == 0


def test_config_n_shows_what_differs_from_the_defaults_and_d_the_defaults(tmp_path):
    conf = tmp_path / "smx.toml"
    conf.write_text('[server]\nhostname = "mx.example.org"\nmax_errors = 10\n'
                    'relay_networks = ["192.0.2.0/24"]\n[client]\nrate_limit = 600\n'
                    'rate_interval = 60\n[routes]\ndefault = "[192.0.2.10]:25"\n')
    r = smx("config", "-n", "-c", str(conf))
    assert r.returncode == 0, r.stderr
    # max_errors is set to its default; helo_name follows hostname.
    assert r.stdout == ('server.hostname = "mx.example.org"\n'
                        'server.relay_networks = ["192.0.2.0/24"]\n'
                        'client.rate_limit = 600\n'
                        'client.rate_interval = 60\n'
                        'routes.default = ["[192.0.2.10]:25"]\n')
    assert 'client.helo_name = "mx.example.org"\n' in smx("config", "-c", str(conf)).stdout
    assert smx("config", "-n", "-c", "").stdout == ""
    # -d: the built-in defaults, whatever the file says.
    d = smx("config", "-d", "-c", str(conf))
    assert d.returncode == 0 and d.stdout == smx("config", "-c", "").stdout
    assert "client.rate_limit = 0\n" in d.stdout


def test_config_keys_are_printed_in_their_order_and_an_unknown_one_is_an_error(tmp_path):
    conf = tmp_path / "smx.toml"
    conf.write_text('[queue]\nretry_min = 60\n[routes]\n"example.net" = "[192.0.2.1]:25"\n')
    r = smx("config", "-c", str(conf), "queue.retry_min", "server.listen", "routes.example.net")
    assert (r.returncode, r.stdout) == (0, 'queue.retry_min = 60\n'
                                           'server.listen = ["127.0.0.1:2525"]\n'
                                           'routes."example.net" = ["[192.0.2.1]:25"]\n')
    assert smx("config", "-n", "-c", str(conf), "server.listen", "queue.retry_min").stdout == \
        "queue.retry_min = 60\n"
    assert smx("config", "-d", "queue.retry_min").stdout == "queue.retry_min = 300\n"
    r = smx("config", "-c", str(conf), "queue.retry_min", "queue.retry_mni")
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == "smx: config: unknown key 'queue.retry_mni'\n"
    r = smx("config", "-n", "-d")
    assert r.returncode == 64 and "config takes -n or -d, not both" in r.stderr
    r = smx("config", "-c", str(tmp_path / "missing.toml"))
    assert r.returncode == 2 and r.stderr.startswith("smx: config error: "), r.stderr


def good_config(tmp_path, extra=""):
    """A config smx run would start with, plus extra lines for [server]."""
    return ('[server]\nlisten = ["127.0.0.1:%d"]\nuser = "root"\n%s\n'
            '[queue]\nspool_dir = "%s"\nrun_dir = "%s"\n'
            % (free_port(), extra, tmp_path / "spool", tmp_path / "run"))


def refused_by_both(path, message):
    """check-config and smx run both exit 2 with the message, and smx run
    starts nothing (no spool made)."""
    for command in ("check-config", "run"):
        r = smx(command, "-c", str(path))
        assert (r.returncode, r.stderr) == (2, "smx: config error: %s\n" % message), command


def test_a_directory_as_the_config_is_refused(tmp_path):
    refused_by_both(tmp_path, "%s: is a directory, not a config file" % tmp_path)


def test_a_log_file_in_a_missing_directory_is_refused(tmp_path):
    conf = tmp_path / "smx.toml"
    log = tmp_path / "no-such-dir" / "smx.log"
    conf.write_text(good_config(tmp_path) + '[log]\nfile = "%s"\n' % log)
    refused_by_both(conf, "log.file: the directory of %s, %s, does not exist" % (log, log.parent))
    assert not (tmp_path / "spool").exists()


@root_only
@pytest.mark.parametrize("key, value, message", [
    ("smtps_user", "no-such-smx-user",
     "server.smtps_user: no such user 'no-such-smx-user' (create it as root with "
     "scripts/lib/setup.sh, or: adduser --system --group --no-create-home no-such-smx-user)"),
    ("group", "no-such-smx-group",
     "server.group: no such group 'no-such-smx-group' (create it as root with "
     "scripts/lib/setup.sh, or: groupadd --system no-such-smx-group)"),
])
def test_an_account_that_does_not_exist_is_refused_as_root(tmp_path, accounts, key, value,
                                                           message):
    conf = tmp_path / "smx.toml"
    conf.write_text(good_config(tmp_path).replace('user = "root"\n', '%s = "%s"\n' % (key, value)))
    refused_by_both(conf, message)


@root_only
def test_a_config_its_reader_may_not_read_is_refused(tmp_path):
    conf = tmp_path / "smx.toml"
    conf.write_text(good_config(tmp_path))
    conf.chmod(0o600)
    os.chmod(tmp_path, 0o755)
    for command in ("check-config", "run"):
        r = as_user("nobody", "nogroup", SMX, command, "-c", str(conf))
        assert (r.returncode, r.stderr) == \
            (2, "smx: config error: %s: cannot read: Permission denied\n" % conf), command


def test_an_open_relay_host_bits_and_bad_domains_are_warnings_smx_run_logs_too(sink, make_relay):
    extra = ('[server]\nrelay_networks = ["127.0.0.0/8", "0.0.0.0/0", "10.0.0.1/8"]\n'
             'relay_domains = ["*.example.com"]\n')
    warnings = [
        'server.relay_networks: "0.0.0.0/0" is every IPv4 address: anyone on the Internet may '
        'relay through smx to any domain (an open relay)',
        'server.relay_networks: "10.0.0.1/8" has host bits set: it means 10.0.0.0/8, every '
        'address of which may relay; write "10.0.0.0/8", or "10.0.0.1/32" for the one host',
        'server.relay_domains: "*.example.com" is not a domain name, so no mail matches it '
        '(".example.com" matches every subdomain of example.com)',
    ]
    relay = make_relay(sink.port, extra, start=False)
    r = relay.smx("check-config")
    assert r.returncode == 0 and r.stdout.startswith("config OK")
    assert r.stderr == "".join("smx: warning: %s\n" % w for w in warnings)
    relay.start()
    wait_until(lambda: all("smx/mcp[%d]: warning: config: %s\n" % (relay.proc.pid, w) in relay.log_text()
                           for w in warnings), 10, "the warnings logged")
