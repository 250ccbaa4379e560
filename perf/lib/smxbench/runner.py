"""One timed run, the strace pass (where perf cannot count fsyncs in the
timed run), and the interleaved suite loop."""
import json
import os
import re
import resource
import subprocess
import time

from .env import log
from .measure import PeakMemory, SyncCounter, TimedSyncCounter, diskstats

# relay-bench's suites: messages per timed run (roughly 3-10 s each; sendmail
# is slow, one process and one next-hop connection per message, so it gets
# fewer) and the axes of the matrix.
SUITES = {
    "quick": {"msgs": {"direct": 3000, "smx": 3000, "postfix": 2000, "sendmail": 600},
              "axes": {"sizes": "1K", "sessions": "100", "rcpts": "1"}},
    "full": {"msgs": {"direct": 10000, "smx": 6000, "postfix": 3000, "sendmail": 1000},
             "axes": {"sizes": "1K,4K,32K", "sessions": "10,100,1000", "rcpts": "1,10"}},
}


class Bench:
    """What every run shares: tools, the sink, the disk to watch."""

    def __init__(self, build, sink, disk, outdir, tool="smx-source"):
        """tool: the load generator, smx-source or postfix's smtp-source."""
        self.source = os.path.join(build, "perf", "smx-source")
        self.tool = tool
        self.sink, self.disk, self.outdir = sink, disk, outdir
        self.lab = None  # the slow-disk lab's device while one is in use

    def source_args(self, system, cfg):
        if self.tool == "smtp-source":
            return smtp_source_args(system.port, cfg["sessions"], cfg["msgs"], size_bytes(cfg["size"]),
                                    cfg["rcpts"])
        return [self.source, "--port", str(system.port), "-s", str(cfg["sessions"]), "-n", str(cfg["msgs"]),
                "-S", cfg["size"], "-r", str(cfg["rcpts"]), "-m", str(cfg.get("per_conn", 1)),
                "--deadline", str(cfg.get("deadline", 600))] + (["--starttls"] if system.tls else [])

    def run(self, system, cfg):
        """One timed run; returns the figures of PERF.md as a dict."""
        n, r = cfg["msgs"], cfg["rcpts"]
        self.sink.arm(n * r)
        cpu0 = system.group.cpu_seconds() if system.group else 0.0
        milter0 = system.milter.group.cpu_seconds() if system.milter else 0.0
        sink0 = self.sink.cpu_seconds()
        disk0 = diskstats(self.disk)
        stats0 = system.stats()
        lab0 = self.lab.counters() if self.lab else None
        mem = PeakMemory(system.group)
        mem.start()
        syncs = TimedSyncCounter(system.group if system.relay else None,
                                 os.path.join(self.outdir, "raw", "perf-stat-%s.csv" % system.name))
        # The source is the only child reaped during the run.
        src0 = children_cpu_seconds()
        inj = self.inject(system, cfg)
        src1 = children_cpu_seconds()
        # The relay may still be delivering: wait for the sink, bounded.
        budget = max(30.0, 5 * inj.get("seconds", 0))
        done, complete = self.sink.wait(budget)
        end = done.get("t_now", time.time())
        cpu1 = system.group.cpu_seconds() if system.group else 0.0
        milter1 = system.milter.group.cpu_seconds() if system.milter else 0.0
        sink1 = self.sink.cpu_seconds()
        disk1 = diskstats(self.disk)
        peak = mem.stop()
        sync_calls = syncs.stop()
        stats1 = system.stats()
        lab1 = self.lab.counters() if self.lab else None
        secs = end - inj.get("t_start", end)
        res = {
            "system": system.name, "config": cfg, "complete": complete,
            "delivered_msgs_per_s": n / secs if complete and secs > 0 else 0.0,
            "delivered_seconds": secs,
            "inject_msgs_per_s": inj.get("msgs_per_s", 0.0),
            "latency_ms": inj.get("latency_ms", {}),
            "acked": inj.get("msgs", 0),
            "errors": inj.get("errors", {}),
            "cpu_s_per_1000": (cpu1 - cpu0) / n * 1000 if system.relay else None,
            "milter_cpu_s_per_1000": (milter1 - milter0) / n * 1000 if system.milter else None,
            "source_cpu_s_per_1000": (src1 - src0) / n * 1000,
            "sink_cpu_s_per_1000": (sink1 - sink0) / n * 1000,
            "peak_pss_mb": peak / 2**20 if system.relay else None,
            "disk_writes_per_msg": (disk1["writes"] - disk0["writes"]) / n,
            "disk_kb_per_msg": (disk1["sectors"] - disk0["sectors"]) * 512 / 1024 / n,
            "flushes_per_msg": (disk1["flushes"] - disk0["flushes"]) / n,
            "source": inj, "sink": done,
        }
        if sync_calls is not None:
            res["sync_calls"] = sync_calls
            res["fsyncs_per_msg"] = sum(sync_calls.values()) / n
        if lab0:
            res["emulated_flushes_per_msg"] = (lab1["flushes"] - lab0["flushes"]) / n
            res["flush_delay_ms"] = self.lab.delay_ms
        if not complete:
            res["errors"] = dict(res["errors"], not_delivered_in_time=1)
        if stats0 and stats1:
            res["smx_stats_delta"] = {k: stats1[k] - stats0.get(k, 0) for k in stats1}
        return res

    def inject(self, system, cfg):
        """Runs the load generator; its figures as smx-source's JSON line has them
        (smtp-source reports no latencies: only its time and its warnings)."""
        t0 = time.time()
        src = subprocess.run(self.source_args(system, cfg), capture_output=True, text=True,
                             timeout=cfg.get("deadline", 600) + 30)
        if self.tool == "smx-source":
            lines = src.stdout.strip().splitlines()
            return json.loads(lines[-1]) if lines else {"msgs": 0, "errors": {"source_failed": 1}}
        secs = time.time() - t0
        errors = {}
        if src.returncode:
            errors["smtp_source_exit"] = 1
        warnings = [line for line in src.stderr.splitlines() if line.strip()]
        if warnings:
            errors["smtp_source_warnings"] = len(warnings)
        n = 0 if src.returncode else cfg["msgs"]
        return {"tool": "smtp-source", "t_start": t0, "seconds": secs, "msgs": n,
                "msgs_per_s": n / secs if secs > 0 else 0.0, "errors": errors, "stderr": warnings[:20]}

    def strace_pass(self, system, cfg, tag):
        """Untimed: fsync + fdatasync calls per message under strace."""
        if not system.relay:
            return {"fsync": 0, "fdatasync": 0, "per_msg": 0.0}
        counter = SyncCounter(system.group, os.path.join(self.outdir, "raw", "strace-%s.txt" % tag))
        try:
            self.sink.arm(cfg["msgs"] * cfg["rcpts"])
            subprocess.run(self.source_args(system, cfg), capture_output=True, timeout=cfg.get("deadline", 600) + 30)
            self.sink.wait(120)
        finally:
            calls = counter.stop()
        calls["per_msg"] = sum(calls.values()) / cfg["msgs"]
        return calls


def children_cpu_seconds():
    """User + system CPU of the child processes reaped so far."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def smtp_source_args(port, sessions, msgs, size, rcpts=1):
    """postfix's smtp-source: one message per connection, no PIPELINING (as
    smx-source's defaults), `size` bytes of body."""
    return ["smtp-source", "-s", str(sessions), "-m", str(msgs), "-l", str(size), "-r", str(rcpts),
            "-f", "sender@source.example", "-t", "rcpt@sink.example", "127.0.0.1:%d" % port]


def size_bytes(spec):
    """A single message size as smx-source's -S takes it (512, 4K, 1M) in bytes."""
    m = re.fullmatch(r"(\d+)([KkMm]?)", spec)
    if not m:
        raise ValueError("smtp-source takes one message size, not %r" % spec)
    return int(m.group(1)) * {"": 1, "k": 1024, "m": 1024 * 1024}[m.group(2).lower()]


def source_refuses(tool, sizes):
    """Why `tool` cannot send messages of these sizes (-S specs), or None."""
    if tool != "smtp-source":
        return None
    try:
        for size in sizes:
            size_bytes(size)
    except ValueError as e:
        return str(e)
    return None


def save(outdir, name, obj):
    os.makedirs(os.path.join(outdir, "raw"), exist_ok=True)
    with open(os.path.join(outdir, "raw", name + ".json"), "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)


def tag_of(base):
    """A configuration's name in results: 1K-s100-r1, 1K-s100-r1-d2ms."""
    tag = "%s-s%d-r%d" % (base["size"].replace(":", "_"), base["sessions"], base["rcpts"])
    if "flush_delay" in base:
        tag += "-d%gms" % base["flush_delay"]
    return tag


def suite(bench, systems, configs, reps, msgs_for, warmup=200, each_round=None):
    """reps rounds; each runs every configuration in turn and, within one,
    every system in turn (A B C D), a system warmed up (untimed) before its
    first run of a configuration. The machine's speed drifts over minutes by
    more than the effects measured, so interleaving spreads that drift over
    all systems and all configurations alike: a comparison across
    configurations (1000 against 100 sessions) is then as fair as one across
    systems. Then one strace pass each where the timed runs could not count
    fsync calls. each_round(rep), when given, runs after each round (measures
    interleaved with the systems'). Returns the results of the timed runs."""
    results = []
    total = len(configs) * reps * len(systems)
    done = 0
    t0 = time.time()
    tags = [tag_of(base) for base in configs]
    for rep in range(reps):
        for base, tag in zip(configs, tags):
            for s in systems:
                if rep == 0:
                    log("%s %s: warm-up run (untimed)" % (tag, s.name))
                    bench.run(s, dict(base, msgs=max(warmup, base["sessions"])))
                cfg = dict(base, msgs=msgs_for(s, base))
                res = bench.run(s, cfg)
                res["rep"], res["tag"] = rep, tag
                save(bench.outdir, "%s-%s-rep%d" % (tag, s.name, rep), res)
                results.append(res)
                done += 1
                eta = (time.time() - t0) / done * (total - done)
                log("[%d/%d] %s %s rep %d: %.0f msgs/s delivered, p99 %.1f ms%s  (eta %.0f s)" % (
                    done, total, tag, s.name, rep + 1, res["delivered_msgs_per_s"],
                    res["latency_ms"].get("p99", 0), "" if res["complete"] else " INCOMPLETE", eta))
        if each_round:
            each_round(rep)
    for base, tag in zip(configs, tags):
        for s in systems:
            timed = [r for r in results if r["tag"] == tag and r["system"] == s.name]
            if not s.relay or all("fsyncs_per_msg" in r for r in timed):
                continue  # counted in the timed runs (perf stat), or nothing to count
            log("%s %s: strace pass (untimed)" % (tag, s.name))
            cfg = dict(base, msgs=min(msgs_for(s, base), 1000))
            calls = bench.strace_pass(s, cfg, "%s-%s" % (tag, s.name))
            save(bench.outdir, "%s-%s-strace" % (tag, s.name), calls)
            for res in results:
                if res["tag"] == tag and res["system"] == s.name:
                    res["fsyncs_per_msg"] = calls["per_msg"]
    return results
