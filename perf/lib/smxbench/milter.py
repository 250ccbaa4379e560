"""relay-bench --milter: smx and postfix each with one milter as their smtpd
milter, the filters the integration tests start (tests/integration/filters.py):
OpenDKIM signing every message (the source's sender domain, its client
127.0.0.1 internal), or smx's null milter (perf/null-milter.c: continues at
every stage, the protocol's cost alone). Each milter system has its own
filter, started and stopped with it, whose processes are a ProcessGroup of
their own: their CPU per message is reported beside the relay's."""
import os
import shutil
import subprocess
import sys

from .env import ROOT, apt_install, log
from .measure import ProcessGroup

sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from filters import NullMilter, OpenDkim  # noqa: E402

# smx-source's sender domain (perf/source_run.hpp, --from-domain), smtp-source's -f.
SENDER_DOMAIN = "source.example"
KINDS = ("dkim", "nullmilter")


def ensure(build):
    """The packages --milter needs, the driver of the ceiling runs and the
    null milter built (where meson found libmilter when it set the build up:
    else it is skipped)."""
    missing = [pkg for pkg, probe in (("opendkim", "opendkim"), ("opendkim-tools", "opendkim-genkey"))
               if not shutil.which(probe)]
    if not os.path.exists("/usr/include/libmilter/mfapi.h"):
        missing.append("libmilter-dev")
    if missing:
        apt_install(missing)
    if subprocess.run(["ninja", "-C", build, "perf/smx-milter-drive"], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode:
        log("perf/smx-milter-drive does not build: the milters alone are skipped")
    if subprocess.run(["ninja", "-C", build, "perf/smx-null-milter"], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode:
        log("perf/smx-null-milter does not build (libmilter-dev missing at meson setup?)")


class Milter:
    """kind: "dkim" or "nullmilter"; build: the meson build with the null milter."""

    def __init__(self, kind, build, port):
        self.kind, self.port, self.build = kind, port, build
        self.binary = os.path.join(build, "perf", "smx-null-milter")
        self.socket = "inet:127.0.0.1:%d" % port
        self.filter = None
        self.group = None

    def another(self, port):
        """A filter of the same kind on another port, for a copy of its system
        that runs beside it (systems.pinned)."""
        return Milter(self.kind, self.build, port)

    def skip_reason(self):
        if self.kind == "dkim" and not shutil.which("opendkim"):
            return "opendkim is not installed (Debian packages opendkim, opendkim-tools)"
        if self.kind == "nullmilter" and not os.access(self.binary, os.X_OK):
            return "%s is not built (libmilter-dev missing at meson setup)" % self.binary
        return None

    def start(self, name, cpus=None):
        self.group = ProcessGroup(name + "-milter", cpus)
        if self.kind == "dkim":
            self.filter = OpenDkim(domain=SENDER_DOMAIN, selector="bench", preexec=self.group.preexec,
                                   port=self.port)
        else:
            self.filter = NullMilter(binary=self.binary, preexec=self.group.preexec, port=self.port)
        self.filter.start()
        self.group.roots = [self.filter.proc.pid]

    def stop(self):
        if self.filter:
            self.filter.stop()
            self.filter = None
        if self.group:
            self.group.remove()

    def version(self):
        if self.kind == "dkim":
            out = subprocess.run(["opendkim", "-V"], capture_output=True, text=True).stdout
            return out.splitlines()[0] if out else "opendkim"
        return "smx-null-milter (libmilter)"


def smx_knows_milters(binary):
    """The smx build has [milter] smtpd_milters (until it does, smx+dkim and
    smx+nullmilter are skipped with that reason)."""
    return subprocess.run([binary, "config", "-d", "milter.smtpd_milters"], capture_output=True).returncode == 0


def markdown(summary):
    """The milters' CPU beside their relays', per configuration."""
    lines = []
    for tag, per_sys in summary.items():
        rows = [(name, s) for name, s in per_sys.items() if s.get("milter_cpu") is not None]
        if rows:
            lines += ["## %s: milter CPU" % tag, "",
                      "| system | delivered msgs/s | relay CPU ms/msg | milter CPU ms/msg | together ms/msg |",
                      "|---|---|---|---|---|"]
            for name, s in rows:
                lines.append("| %s | %.0f | %.3f | %.3f | %.3f |" % (
                    name, s["delivered"] or 0, s["cpu"] or 0, s["milter_cpu"], (s["cpu"] or 0) + s["milter_cpu"]))
            lines.append("")
    return "\n".join(lines)
