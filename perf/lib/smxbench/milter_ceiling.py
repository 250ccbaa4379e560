"""relay-bench --milter's ceiling rows: each milter kind alone, without an
MTA, driven at full speed by perf/smx-milter-drive (libsm's milter client,
the events SMTPS sends, the messages smx-source sends, one milter
connection per message as one SMTP session per message), so that what the
milter can do on this machine stands beside what smx and postfix do with
it. The milter is started as the relay systems start theirs (milter.Milter)
and its CPU per message measured the same way (its ProcessGroup); the
driver reports its own. Then (cores) / (milter + driver CPU per message) is
the most this box can do with that milter in the path."""
import json
import os
import subprocess

from . import milter
from .env import free_port, log
from .report import med
from .runner import tag_of

DRIVER = os.path.join("perf", "smx-milter-drive")
# What each kind's end of message must carry for a message to count.
EXPECT_HEADER = {"dkim": "DKIM-Signature", "nullmilter": None}


def row_name(kind):
    return "%s alone (driver)" % kind


class Ceiling:
    """One milter of `kind`, started for the ceiling runs, and the driver."""

    def __init__(self, kind, build):
        self.kind, self.name = kind, row_name(kind)
        self.milter = milter.Milter(kind, build, free_port())
        self.driver = os.path.join(build, DRIVER)

    def skip_reason(self):
        if not os.access(self.driver, os.X_OK):
            return "%s is not built" % self.driver
        return self.milter.skip_reason()

    def start(self):
        self.milter.start("ceiling-" + self.kind)

    def stop(self):
        self.milter.stop()

    def run(self, cfg, msgs):
        """One run of msgs messages at cfg's size and sessions; the figures."""
        args = [self.driver, "--milter", self.milter.socket, "-s", str(cfg["sessions"]), "-n", str(msgs),
                "-m", "1", "-S", cfg["size"], "--from-domain", milter.SENDER_DOMAIN]
        if EXPECT_HEADER[self.kind]:
            args += ["--expect-header", EXPECT_HEADER[self.kind]]
        cpu0 = self.milter.group.cpu_seconds()
        drv = subprocess.run(args, capture_output=True, text=True, timeout=900)
        cpu1 = self.milter.group.cpu_seconds()
        lines = drv.stdout.strip().splitlines()
        out = json.loads(lines[-1]) if lines else {"msgs": 0, "failed": msgs, "errors": {"driver_failed": 1},
                                                   "stderr": drv.stderr[-2000:]}
        complete = drv.returncode == 0 and out.get("failed", 1) == 0 and out["msgs"] == msgs
        return {"system": self.name, "kind": self.kind, "tag": tag_of(cfg), "config": dict(cfg, msgs=msgs),
                "complete": complete, "msgs_per_s": out.get("msgs_per_s", 0.0) if complete else 0.0,
                "milter_cpu_ms_per_msg": (cpu1 - cpu0) / msgs * 1000,
                "driver_cpu_ms_per_msg": out.get("cpu_ms_per_msg"), "driver": out}


class Ceilings:
    """Every milter kind alone, in rounds interleaved with the relay-bench
    suite's (runner.suite's each_round), so that the machine's drift and the
    other load on it hit the relays with a milter and the milters alone
    alike. One recipient only: the driver sends one."""

    def __init__(self, build, cfgs, msgs_for, warmup=200):
        self.cfgs = [c for c in cfgs if c["rcpts"] == 1]
        self.msgs_for, self.warmup = msgs_for, warmup
        self.ceilings, self.skipped, self.results = [], {}, []
        for kind in milter.KINDS:
            c = Ceiling(kind, build)
            why = c.skip_reason()
            if why:
                log("skipping %s: %s" % (c.name, why))
                self.skipped[c.name] = why
            else:
                self.ceilings.append(c)

    def start(self):
        for c in self.ceilings:
            c.start()

    def round(self, rep):
        """Every configuration with every kind in turn, each warmed up
        (untimed) in the first round."""
        for cfg in self.cfgs:
            for c in self.ceilings:
                if rep == 0:
                    log("%s %s: warm-up run (untimed)" % (tag_of(cfg), c.name))
                    c.run(cfg, max(self.warmup, cfg["sessions"]))
                res = c.run(cfg, self.msgs_for(cfg))
                res["rep"] = rep
                self.results.append(res)
                log("%s %s rep %d: %.0f msgs/s, milter %.3f ms/msg, driver %.3f ms/msg%s" % (
                    res["tag"], c.name, rep + 1, res["msgs_per_s"], res["milter_cpu_ms_per_msg"],
                    res["driver_cpu_ms_per_msg"] or 0,
                    "" if res["complete"] else " FAILED %s" % res["driver"].get("errors")))

    def close(self):
        for c in self.ceilings:
            c.stop()


def markdown(results, skipped, summary, cores):
    """Per configuration: each milter alone (median of the runs; a run with
    any failure counts as none), the box's CPU ceiling with it, and each
    relay with that milter against it."""
    lines = []
    for tag in dict.fromkeys(r["tag"] for r in results):
        lines += ["## %s: the milter alone (smx-milter-drive, no MTA; %d cores)" % (tag, cores), "",
                  "| row | msgs/s | failed runs | milter CPU ms/msg | driver CPU ms/msg "
                  "| box ceiling msgs/s = %d cores / (milter + driver) |" % cores,
                  "|---|---|---|---|---|---|"]
        alone = {}
        for kind in milter.KINDS:
            runs = [r for r in results if r["tag"] == tag and r["kind"] == kind]
            if not runs:
                continue
            good = [r for r in runs if r["complete"]]
            failed = len(runs) - len(good)
            if not good:
                lines.append("| %s | FAILED | %d of %d | | | |" % (row_name(kind), failed, len(runs)))
                continue
            thr = med([r["msgs_per_s"] for r in good])
            mcpu = med([r["milter_cpu_ms_per_msg"] for r in good])
            dcpu = med([r["driver_cpu_ms_per_msg"] for r in good])
            alone[kind] = thr
            lines.append("| %s | %.0f (%.0f-%.0f) | %d of %d | %.3f | %.3f | %.0f |" % (
                row_name(kind), thr, min(r["msgs_per_s"] for r in good), max(r["msgs_per_s"] for r in good),
                failed, len(runs), mcpu, dcpu, cores * 1000 / (mcpu + dcpu)))
        lines.append("")
        relays = [(name, s, kind) for name, s in summary.get(tag, {}).items() for kind in alone
                  if name.endswith("+" + kind) and s.get("delivered")]
        if relays:
            lines += ["| relay with the milter | delivered msgs/s | of the milter alone "
                      "| relay + milter CPU ms/msg | box ceiling msgs/s = %d cores / (relay + milter + source + sink) |"
                      % cores, "|---|---|---|---|---|"]
            for name, s, kind in relays:
                total = sum(s.get(k) or 0 for k in ("cpu", "milter_cpu", "source_cpu", "sink_cpu"))
                lines.append("| %s | %.0f | %.2f | %.3f | %s |" % (
                    name, s["delivered"], s["delivered"] / alone[kind], (s["cpu"] or 0) + (s["milter_cpu"] or 0),
                    "%.0f" % (cores * 1000 / total) if total else "n/a"))
            lines.append("")
    for name, why in skipped.items():
        lines.append("%s: skipped (%s)" % (name, why))
    return "\n".join(lines) + "\n"
