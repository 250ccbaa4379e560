"""The systems under test. Each relays everything from 127.0.0.1 on its own
port to the one sink; `direct` is the source talking to the sink itself."""
import copy
import os
import shutil
import signal
import subprocess

from . import milter as milters
from . import policy as gateway
from .env import PERF, free_port, log, wait_port
from .measure import ProcessGroup

PEERS = os.path.join(PERF, "peers")


class System:
    name = "?"
    relay = True
    cpus = None  # pinned() sets it

    def __init__(self, workdir, sink_port, tls=None, label=None, policy=None, milter=None):
        """tls: {"cert": PEM, "key": PEM} for STARTTLS in and out (the
        source's connections and the relay's to the sink), else None.
        policy: a policy.PolicyLab (relay-bench --policy), else None.
        milter: a milter.Milter, the relay's one smtpd milter (relay-bench
        --milter), started and stopped with it, else None."""
        if label:
            self.name = label
        self.tls = tls
        self.policy = policy
        self.milter = milter
        # With a policy: {"tool", "seconds"} of building its recipient table.
        self.table_build = None
        self.dir = os.path.join(workdir, self.name)
        self.sink_port = sink_port
        self.port = None
        self.group = None
        # Extra environment of the daemons, e.g. the slow-disk lab's
        # LD_PRELOAD (flushlab.FlushLab.env()); set before start().
        self.env = {}
        # A variant's own environment (relay-bench --smx-env), kept across restarts.
        self.base_env = {}

    def environ(self):
        return dict(os.environ, **self.base_env, **self.env)

    def skip_reason(self):
        return self.milter.skip_reason() if self.milter else None

    def start_milter(self):
        if self.milter:
            self.milter.start(self.name, self.cpus)

    def config_files(self):
        """{file name: text} of the configuration used, for the results."""
        return {}

    def stats(self):
        return {}

    def stop(self):
        if self.group:
            self.group.remove()
        if self.milter:
            self.milter.stop()


class Direct(System):
    name = "direct"
    relay = False

    def setup(self, port):
        self.port = self.sink_port

    def start(self):
        pass

    def version(self):
        return "smx-sink"


class Postfix(System):
    name = "postfix"

    def setup(self, port):
        self.port = port
        shutil.rmtree(self.dir, ignore_errors=True)
        tls = [self.tls["cert"], self.tls["key"]] if self.tls else []
        subprocess.run([os.path.join(PEERS, "postfix.sh"), "setup", self.dir, str(port), str(self.sink_port)] + tls,
                       check=True)
        if self.policy:
            etc = os.path.join(self.dir, "etc")
            self.table_build = {"tool": "postmap", "seconds": self.policy.build(etc, ["postmap", "-c", etc])}
            subprocess.run([os.path.join(PEERS, "postfix.sh"), "policy", self.dir, str(port), self.policy.resolv],
                           check=True)
        if self.milter:
            subprocess.run(["postconf", "-c", os.path.join(self.dir, "etc"), "-e",
                            "smtpd_milters = " + self.milter.socket, "milter_default_action = tempfail"], check=True)

    def start(self):
        self.start_milter()
        self.group = ProcessGroup(self.name, self.cpus)
        subprocess.run([os.path.join(PEERS, "postfix.sh"), "start", self.dir], check=True,
                       preexec_fn=self.group.preexec, env=self.environ(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.group.roots = self._pids()[:1]
        if not wait_port(self.port):
            raise RuntimeError("postfix does not listen on %d" % self.port)
        if self.policy:
            gateway.probe(self.port, self.policy, "postfix")

    def _pids(self):
        out = subprocess.run([os.path.join(PEERS, "postfix.sh"), "pids", self.dir],
                             capture_output=True, text=True).stdout
        return [int(x) for x in out.split()]

    def stop(self):
        subprocess.run([os.path.join(PEERS, "postfix.sh"), "stop", self.dir], check=False)
        super().stop()

    def version(self):
        return "postfix " + subprocess.run([os.path.join(PEERS, "postfix.sh"), "version"],
                                           capture_output=True, text=True).stdout.strip()

    def config_files(self):
        return {f: open(os.path.join(self.dir, "etc", f)).read() for f in ("main.cf", "master.cf")}


class Sendmail(System):
    name = "sendmail"

    def __init__(self, workdir, sink_port):
        super().__init__(workdir, sink_port)
        # The unpacked packages outlive a suite: they are only downloaded once.
        self.prefix = os.path.join(PERF, ".peers", "sendmail-pkg")
        self.script = os.path.join(PEERS, "sendmail.sh")

    def skip_reason(self):
        if subprocess.run([self.script, "install", self.prefix], stdout=subprocess.DEVNULL).returncode:
            return "sendmail packages could not be downloaded/unpacked"
        return None

    def setup(self, port):
        self.port = port
        shutil.rmtree(self.dir, ignore_errors=True)
        subprocess.run([self.script, "setup", self.prefix, self.dir, str(port), str(self.sink_port)],
                       check=True, stderr=subprocess.DEVNULL)

    def start(self):
        self.group = ProcessGroup(self.name, self.cpus)
        subprocess.run([self.script, "start", self.prefix, self.dir], check=True,
                       preexec_fn=self.group.preexec, env=self.environ())
        out = subprocess.run([self.script, "pids", self.prefix, self.dir], capture_output=True, text=True).stdout
        self.group.roots = [int(x) for x in out.split()][:1]
        if not wait_port(self.port):
            raise RuntimeError("sendmail does not listen on %d" % self.port)

    def stop(self):
        subprocess.run([self.script, "stop", self.prefix, self.dir], check=False)
        super().stop()

    def version(self):
        return "sendmail " + subprocess.run([self.script, "version", self.prefix],
                                            capture_output=True, text=True).stdout.strip()

    def config_files(self):
        return {"relay.mc": open(os.path.join(self.dir, "relay.mc")).read()}


def pinned(system, cpus):
    """A copy of system whose processes run on the CPUs of the `taskset -c`
    style list cpus ("0", "0,1", "0-3"), named e.g. smx@0,1."""
    s = copy.copy(system)
    s.cpus = set()
    for part in cpus.split(","):
        lo, _, hi = part.partition("-")
        s.cpus.update(range(int(lo), int(hi or lo) + 1))
    s.name = "%s@%s" % (system.name, cpus)
    s.dir = os.path.join(os.path.dirname(system.dir), s.name)
    if system.milter:  # both run at once: each its own filter
        s.milter = system.milter.another(free_port())
    return s


def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


class Smx(System):
    name = "smx"

    def __init__(self, workdir, sink_port, build, overrides=None, label=None, tls=None, policy=None, milter=None):
        super().__init__(workdir, sink_port, tls, label, policy, milter)
        self.binary = os.path.join(build, "mcp", "smx")
        self.overrides = overrides or {}
        self.proc = None

    def skip_reason(self):
        if not os.access(self.binary, os.X_OK):
            return "%s does not exist yet" % self.binary
        for child in ("qmgr/smx-qmgr", "smtps/smx-smtps", "smtpc/smx-smtpc"):
            if not os.access(os.path.join(os.path.dirname(os.path.dirname(self.binary)), child), os.X_OK):
                return "%s is not built yet" % child
        return super().skip_reason()

    def config(self, port):
        cfg = {
            "server": {"listen": ["127.0.0.1:%d" % port], "hostname": "relay-smx.perf.example"},
            # Durable defaults; the group-commit knobs are the sweep's.
            "queue": {"spool_dir": os.path.join(self.dir, "spool"), "run_dir": os.path.join(self.dir, "run")},
            # Admin tuning like postfix's: one next hop gets all the mail.
            "client": {"max_concurrency": 100},
            "routes": {"default": "[127.0.0.1]:%d" % self.sink_port},
            # Logging on, to a file: what an admin runs with.
            "log": {"level": "info", "file": os.path.join(self.dir, "smx.log")},
        }
        if self.tls:
            cfg["server"].update(tls_cert=self.tls["cert"], tls_key=self.tls["key"])
            cfg["client"]["tls_security_level"] = "encrypt"
        else:
            # The sink may offer STARTTLS (relay-bench --tls): not used here.
            cfg["client"]["tls_security_level"] = "none"
        if os.geteuid() == 0:
            # The children stay root, as before there were smxs/smxq/smxc: the
            # work directory may be out of their accounts' reach.
            cfg["server"]["user"] = "root"
        overrides = list(gateway.smx_overrides(self.policy, self.dir).items()) if self.policy else []
        if self.milter:
            overrides.append(("milter", {"smtpd_milters": [self.milter.socket]}))
        for section, keys in overrides + list(self.overrides.items()):
            cfg.setdefault(section, {}).update(keys)
        lines = []
        for section, keys in cfg.items():
            lines.append("[%s]" % section)
            lines += ["%s = %s" % (k if k.replace("_", "").isalnum() else toml_value(k), toml_value(v))
                      for k, v in keys.items()]
            lines.append("")
        return "\n".join(lines)

    def setup(self, port):
        if self.milter and not milters.smx_knows_milters(self.binary):
            raise RuntimeError("smx build has no milter support (smx config knows no milter.smtpd_milters)")
        self.port = port
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        self.conf = os.path.join(self.dir, "smx.toml")
        with open(self.conf, "w") as f:
            f.write(self.config(port))
        if self.policy:
            self.table_build = {"tool": "smx map build",
                                "seconds": self.policy.build(self.dir, [self.binary, "map", "build"])}
            # Its keys are newer than some builds: say why it cannot run.
            check = subprocess.run([self.binary, "check-config", "-c", self.conf], capture_output=True, text=True)
            if check.returncode:
                raise RuntimeError("smx refuses the policy config: %s" % (check.stderr or check.stdout).strip()[-500:])

    def start(self):
        self.start_milter()
        self.group = ProcessGroup(self.name, self.cpus)
        self.proc = subprocess.Popen([self.binary, "run", "-c", self.conf], preexec_fn=self.group.preexec,
                                     env=self.environ(),
                                     stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.dir, "stderr"), "w"))
        self.group.roots = [self.proc.pid]
        if not wait_port(self.port):
            self.stop()
            raise RuntimeError("smx does not listen on %d (see %s/stderr)" % (self.port, self.dir))
        if self.policy:
            gateway.probe(self.port, self.policy, "smx")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                log("smx did not stop in 15 s: killing it")
                self.proc.kill()
                self.proc.wait()
        super().stop()

    def stats(self):
        out = subprocess.run([self.binary, "stats", "-c", self.conf], capture_output=True, text=True,
                             timeout=30).stdout
        stats = {}
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2:
                try:
                    stats[parts[0]] = float(parts[1])
                except ValueError:
                    pass
        return stats

    def version(self):
        return subprocess.run([self.binary, "--version"], capture_output=True, text=True).stdout.strip()

    def config_files(self):
        return {"smx.toml": open(self.conf).read()}
