"""relay-bench --policy: smx and postfix as the Internet gateway of a domain,
every check paid for by the benchmark's client (127.0.0.1, not trusted):
a 1,000,000-entry relay recipient table, a client access table, anvil rate
limits set beyond reach, and one DNSBL served by a real rbldnsd. This side
writes the tables and the zone, runs rbldnsd, builds each relay's maps
(timed) and checks that a relay refuses an unknown recipient and asks the
DNSBL before it is measured."""
import os
import pwd
import shutil
import smtplib
import socket
import subprocess
import time

from .env import log

# smx-source's default --rcpt-domain, and smtp-source's -t (runner.smtp_source_args).
RCPT_DOMAIN = "sink.example"
ZONE = "bl.perf.example"
# The relays' trusted networks: not the benchmark's 127.0.0.1 (TEST-NET-1).
TRUSTED = "192.0.2.0/24"
# Rate limits the benchmark never reaches (per client per rate_time_unit).
RATE = 100000000
# Concurrent sessions from the one client: the matrix's 1000 and then some
# (both relays default to 50 for a client outside the trusted networks).
CONNECTIONS = 2000
TABLE_ENTRIES = 1000000
RECIPIENTS_PER_MESSAGE = 10  # the matrix's largest -r
ACCESS_ENTRIES = 300


def message_capacity(entries):
    """Messages a run may send before smx-source's recipients (u<msg>.<rcpt>)
    leave the table."""
    return entries // RECIPIENTS_PER_MESSAGE


def recipient_lines(entries):
    """The relay recipient table: every address smx-source sends to for
    message numbers below message_capacity(entries), with up to 10
    recipients (perf/source_run.cpp, Run::envelope), then smtp-source's
    (rcpt@, or 0rcpt@ .. 9rcpt@ with -r)."""
    for i in range(message_capacity(entries)):
        for j in range(RECIPIENTS_PER_MESSAGE):
            yield "u%d.%d@%s OK\n" % (i, j, RCPT_DOMAIN)
    yield "rcpt@%s OK\n" % RCPT_DOMAIN
    for j in range(RECIPIENTS_PER_MESSAGE):
        yield "%drcpt@%s OK\n" % (j, RCPT_DOMAIN)


def access_lines():
    """Client networks refused (access(5) octet prefixes), none of them 127."""
    for n in range(ACCESS_ENTRIES):
        yield "10.%d.%d REJECT\n" % (n // 100, n % 100)


def free_dns_address():
    """A loopback address whose UDP port 53 is free, for postfix's resolver
    (which knows no port): 127.0.0.153 unless something answers there."""
    for last in range(153, 254):
        addr = "127.0.0.%d" % last
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.bind((addr, 53))
                return addr
            except OSError:
                continue
    raise RuntimeError("no loopback address 127.0.0.153..253 has UDP port 53 free")


def free_udp_port():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PolicyLab:
    """The text tables, the DNSBL zone and one rbldnsd per relay (each with
    its own query log): smx's on a port of 127.0.0.1 (client.dns_servers),
    postfix's on port 53 of another loopback address, named in the
    resolv.conf its private mount namespace sees (perf/peers/postfix.sh)."""

    def __init__(self, workdir, entries=TABLE_ENTRIES):
        self.dir = os.path.join(workdir, "policy")
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        os.chmod(self.dir, 0o755)  # rbldnsd reads the zone and writes its log as rbldns
        self.entries = entries
        self.recipients = os.path.join(self.dir, "relay_recipients")
        self.access = os.path.join(self.dir, "client_access")
        with open(self.recipients, "w") as f:
            f.writelines(recipient_lines(entries))
        with open(self.access, "w") as f:
            f.writelines(access_lines())
        self.zone = os.path.join(self.dir, "bl.zone")
        with open(self.zone, "w") as f:
            # Answers are cached by both relays for their TTL (an hour):
            # only a relay's first connection, and one an hour, waits for rbldnsd.
            f.write("$SOA 3600 %s. hostmaster.perf.example. 1 3600 600 86400 3600\n"
                    "$NS 3600 %s.\n"
                    ":127.0.0.2:Listed by the relay-bench DNSBL\n"
                    "127.0.0.2\n198.51.100.0/24\n203.0.113.0/24\n" % (ZONE, ZONE))
        self.resolv = os.path.join(self.dir, "resolv.conf")
        self.servers = {}  # "smx" | "postfix": (address, port)
        self.procs = {}

    def listen(self, smx_port, postfix_address):
        """Where the two rbldnsd will answer: 127.0.0.1:smx_port for smx,
        postfix_address:53 for postfix (its resolv.conf says so)."""
        self.servers = {"smx": ("127.0.0.1", smx_port), "postfix": (postfix_address, 53)}
        with open(self.resolv, "w") as f:
            f.write("nameserver %s\n" % postfix_address)

    def start(self):
        self.listen(free_udp_port(), free_dns_address())
        rbldns = pwd.getpwnam("rbldns")
        for name, (addr, port) in self.servers.items():
            logfile = self.query_log(name)
            open(logfile, "w").close()
            os.chown(logfile, rbldns.pw_uid, rbldns.pw_gid)
            self.procs[name] = subprocess.Popen(
                ["rbldnsd", "-n", "-u", "rbldns", "-w", self.dir, "-b", "%s/%d" % (addr, port),
                 "-l", "+" + logfile, "%s:ip4set:%s" % (ZONE, os.path.basename(self.zone))],
                stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.dir, "rbldnsd-%s.err" % name), "w"))
        for name, (addr, port) in self.servers.items():
            if not self._answers(addr, port):
                raise RuntimeError("rbldnsd does not answer on %s:%d (see %s)" % (
                    addr, port, os.path.join(self.dir, "rbldnsd-%s.err" % name)))
        log("DNSBL %s: rbldnsd for smx on 127.0.0.1:%d, for postfix on %s:53" % (
            ZONE, self.servers["smx"][1], self.servers["postfix"][0]))

    def _answers(self, addr, port, timeout=10.0):
        """True once rbldnsd answers 127.0.0.2's entry (the zone is loaded)."""
        end = time.time() + timeout
        while time.time() < end:
            out = subprocess.run(["dig", "+short", "+time=1", "+tries=1", "@" + addr, "-p", str(port),
                                  "2.0.0.127.%s" % ZONE, "A"], capture_output=True, text=True).stdout
            if "127.0.0.2" in out:
                return True
            time.sleep(0.2)
        return False

    def query_log(self, name):
        return os.path.join(self.dir, "queries-%s.log" % name)

    def queries(self, name):
        """Queries rbldnsd answered for this relay (each a line of its log),
        not counting the lab's own check of 127.0.0.2."""
        with open(self.query_log(name)) as f:
            return sum(1 for line in f if ZONE in line and "2.0.0.127.%s" % ZONE not in line)

    def build(self, into, command):
        """Copies both text tables into the directory into and builds them
        there with command + [table] (`smx map build`, `postmap -c ...`);
        returns the seconds the recipient table took."""
        seconds = None
        for src in (self.recipients, self.access):
            path = os.path.join(into, os.path.basename(src))
            shutil.copyfile(src, path)
            t0 = time.time()
            res = subprocess.run(command + [path], capture_output=True, text=True)
            if res.returncode:
                raise RuntimeError("%s %s failed: %s" % (" ".join(command), path,
                                                         (res.stderr or res.stdout).strip()[-500:]))
            if src == self.recipients:
                seconds = time.time() - t0
        return seconds

    def close(self):
        for proc in self.procs.values():
            proc.terminate()
            proc.wait()
        self.procs = {}


def smx_overrides(lab, tables):
    """smx's config sections for the policy (keys of issue 28), its tables
    in the directory tables."""
    return {
        "server": {"relay_networks": [TRUSTED], "relay_domains": [RCPT_DOMAIN],
                   "max_connections_per_client": CONNECTIONS},
        "policy": {"relay_recipient_maps": ["hash:" + os.path.join(tables, "relay_recipients")],
                   "client_access": ["hash:" + os.path.join(tables, "client_access")]},
        "anvil": {"connection_rate_limit": RATE, "message_rate_limit": RATE, "recipient_rate_limit": RATE,
                  "exceptions": []},
        "dnsbl": {"sites": ["%s*1" % ZONE]},
        "client": {"dns_servers": ["127.0.0.1:%d" % lab.servers["smx"][1]]},
    }


def probe(port, lab, name):
    """Before a policy relay is measured: an unknown recipient must get 550
    and a listed one 250 (the table is in force), and the relay must have
    asked rbldnsd about 127.0.0.1. postscreen holds a new client for its
    greet wait (6 s) first. Raises RuntimeError saying what is wrong."""
    with smtplib.SMTP("127.0.0.1", port, timeout=60) as c:
        c.ehlo("probe.perf.example")
        code, _ = c.mail("sender@source.example")
        if code != 250:
            raise RuntimeError("MAIL FROM got %d" % code)
        unknown = c.rcpt("nobody@%s" % RCPT_DOMAIN)
        known = c.rcpt("u0.0@%s" % RCPT_DOMAIN)
        c.rset()
    if unknown[0] != 550 or known[0] != 250:
        raise RuntimeError("the relay recipient table is not in force: an unknown recipient got %d %s, "
                           "u0.0@%s got %d" % (unknown[0], unknown[1].decode(errors="replace"), RCPT_DOMAIN,
                                               known[0]))
    if not lab.queries(name):
        raise RuntimeError("the relay never asked rbldnsd about its client (%s)" % lab.query_log(name))


def markdown(summary, builds, lab):
    """The policy section of results.md: per configuration the ratios the
    targets name, and the extra CPU per message that the checks cost."""
    lines = ["## Policy axis (`--policy`)", "",
             "smx+policy and postfix+policy: the client 127.0.0.1 outside the trusted networks (%s), "
             "recipients in %s checked against a %s-entry hash: table, a %d-entry client access table, "
             "anvil rate limits of %d per minute with no exceptions, and DNSBL %s (rbldnsd, not listing "
             "127.0.0.1): smx's answer cache, postscreen's cache in front of postfix's smtpd (pregreet "
             "results cached too), so only a relay's first connection (the untimed probe) waits for DNS." % (
                 TRUSTED, RCPT_DOMAIN, "{:,}".format(lab.entries), ACCESS_ENTRIES, RATE, ZONE), ""]
    if builds:
        lines += ["Recipient table build ({:,} entries): ".format(lab.entries) +
                  ", ".join("%s %.2f s (%s)" % (name, b["seconds"], b["tool"]) for name, b in builds.items()) +
                  ".", ""]
    lines += ["DNSBL queries answered by rbldnsd over the whole run: smx %d, postfix %d." % (
        lab.queries("smx"), lab.queries("postfix")), "",
              "| configuration | smx+policy ÷ smx (target ≥ 0.90) | smx+policy ÷ postfix+policy "
              "(target ≥ 8 at 100 sessions) | postfix+policy ÷ postfix | smx extra CPU µs/msg | "
              "postfix extra CPU µs/msg |",
              "|---|---|---|---|---|---|"]
    for tag, per_sys in summary.items():
        cells = [_ratio(per_sys, "smx+policy", "smx"), _ratio(per_sys, "smx+policy", "postfix+policy"),
                 _ratio(per_sys, "postfix+policy", "postfix"),
                 _extra_cpu(per_sys, "smx"), _extra_cpu(per_sys, "postfix")]
        lines.append("| %s | %s |" % (tag, " | ".join(cells)))
    return "\n".join(lines) + "\n"


def _ratio(per_sys, a, b):
    x, y = per_sys.get(a, {}).get("delivered"), per_sys.get(b, {}).get("delivered")
    return "%.2f" % (x / y) if x and y else "n/a"


def _extra_cpu(per_sys, name):
    """CPU s/1000 msgs with policy minus without, in µs per message."""
    x, y = per_sys.get(name + "+policy", {}).get("cpu"), per_sys.get(name, {}).get("cpu")
    return "%.0f" % ((x - y) * 1000) if x is not None and y is not None else "n/a"
