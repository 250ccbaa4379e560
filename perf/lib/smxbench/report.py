"""results.md (medians, spread, ratios) and PNG plots from the runs."""
import os
import statistics


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(v, digits=0):
    if v is None:
        return "n/a"
    return ("%%.%df" % digits) % v


def summarize(results):
    """{tag: {system: summary}} in first-seen order."""
    out = {}
    for r in results:
        out.setdefault(r["tag"], {}).setdefault(r["system"], []).append(r)
    summary = {}
    for tag, per_sys in out.items():
        summary[tag] = {}
        for name, runs in per_sys.items():
            thr = [r["delivered_msgs_per_s"] for r in runs]
            summary[tag][name] = {
                "runs": len(runs), "complete": sum(r["complete"] for r in runs),
                "delivered": med(thr), "min": min(thr), "max": max(thr),
                "inject": med([r["inject_msgs_per_s"] for r in runs]),
                "p50": med([r["latency_ms"].get("p50") for r in runs]),
                "p99": med([r["latency_ms"].get("p99") for r in runs]),
                "fsyncs": med([r.get("fsyncs_per_msg") for r in runs]),
                "flushes": med([r["flushes_per_msg"] for r in runs]),
                "writes": med([r["disk_writes_per_msg"] for r in runs]),
                "kb": med([r["disk_kb_per_msg"] for r in runs]),
                "cpu": med([r["cpu_s_per_1000"] for r in runs]),
                "milter_cpu": med([r.get("milter_cpu_s_per_1000") for r in runs]),
                "source_cpu": med([r.get("source_cpu_s_per_1000") for r in runs]),
                "sink_cpu": med([r.get("sink_cpu_s_per_1000") for r in runs]),
                "pss": med([r["peak_pss_mb"] for r in runs]),
                "errors": sum(sum(r["errors"].values()) for r in runs),
                "msgs": runs[0]["config"]["msgs"],
                "ibdb_commits_per_1000": med([_per_1000(r, "ibdb_commits") for r in runs]),
                "emulated_flushes": med([r.get("emulated_flushes_per_msg") for r in runs]),
                "flush_delay_ms": runs[0].get("flush_delay_ms"),
            }
    return summary


def scaling(results):
    """Throughput at each session count against the same configuration at
    100 sessions (or the fewest run), per system, paired by rep: the two runs
    of a pair came in the same round (runner.suite), so the machine's drift
    mostly cancels. Rows: {config, system, base, sessions, ratio (median),
    min, max, pairs}."""
    def group(r):
        c = r["config"]
        return c["size"], c["rcpts"], c.get("flush_delay")
    runs = {}
    for r in results:
        if r["complete"] and r["delivered_msgs_per_s"] > 0:
            runs.setdefault(group(r), {}).setdefault(r["system"], {}).setdefault(
                r["config"]["sessions"], {})[r["rep"]] = r["delivered_msgs_per_s"]
    rows = []
    for (size, rcpts, delay), per_sys in runs.items():
        for name, by_sessions in per_sys.items():
            counts = sorted(by_sessions)
            base = 100 if 100 in counts else counts[0]
            for n in counts:
                if n == base:
                    continue
                ratios = [by_sessions[n][rep] / by_sessions[base][rep]
                          for rep in by_sessions[n] if rep in by_sessions[base]]
                if ratios:
                    config = "%s, %d rcpt%s" % (size, rcpts, "" if rcpts == 1 else "s")
                    if delay is not None:
                        config += ", %g ms flushes" % delay
                    rows.append({"config": config, "system": name, "base": base, "sessions": n,
                                 "ratio": med(ratios), "min": min(ratios), "max": max(ratios),
                                 "pairs": len(ratios)})
    return rows


def scaling_markdown(rows):
    if not rows:
        return []
    lines = ["## Session counts, paired by rep", "",
             "Delivered msgs/s at N sessions ÷ the same system's at the base count, each pair from one "
             "round of the interleaved runs: the median of the pairs [min–max]. direct shows what the "
             "load generator and sink themselves keep at N sessions on this machine.", "",
             "| configuration | system | N ÷ base sessions | ratio [min–max] | pairs |",
             "|---|---|---|---|---|"]
    for r in rows:
        lines.append("| %s | %s | %d ÷ %d | %.2f [%.2f–%.2f] | %d |" % (
            r["config"], r["system"], r["sessions"], r["base"], r["ratio"], r["min"], r["max"], r["pairs"]))
    return lines + [""]


def _per_1000(run, stat):
    """A `smx stats` counter's delta over the run, per 1000 messages."""
    d = run.get("smx_stats_delta", {})
    return d[stat] / run["config"]["msgs"] * 1000 if stat in d else None


def ratios(per_sys):
    """[(a, b, a's delivered msgs/s ÷ b's)] of one configuration, for the
    pairs compared (smx against each peer, its variants, TLS against none)."""
    pairs = (("smx", "postfix"), ("smx", "sendmail"), ("smx", "direct"), ("postfix", "sendmail"),
             ("postfix", "direct"), ("smx+tls", "postfix+tls"), ("smx+tls", "smx"), ("postfix+tls", "postfix"))
    pairs += tuple(("smx", b) for b in per_sys if b.startswith("smx-"))
    out = []
    for a, b in pairs:
        x, y = per_sys.get(a), per_sys.get(b)
        if x and y and x["delivered"] and y["delivered"]:
            out.append((a, b, x["delivered"] / y["delivered"]))
    return out


def markdown(title, summary, facts=None, versions=None, skipped=None, crosscheck=None, scaled=None):
    """The results page; without facts only the title and the tables (for
    embedding in another page)."""
    lines = ["# %s" % title, ""]
    if facts:
        lines += ["Machine: %(cores)s cores (%(cpu_model)s), %(memory_mb)s MB, %(os)s, kernel %(kernel)s, "
                  "%(filesystem)s on %(device)s; load average at start %(loadavg_at_start)s" % facts
                  + ("; at the end %s." % (facts["loadavg_at_end"],) if "loadavg_at_end" in facts else "."), ""]
        lines += ["Versions: " + "; ".join("%s: %s" % kv for kv in versions.items()), ""]
    for name, why in (skipped or {}).items():
        lines += ["**%s skipped**: %s" % (name, why), ""]
    lines += ["Delivered msgs/s = N / (time from the first connect until the sink has all N): the median "
              "of the reps, [min–max] the spread. Latency = end-of-DATA → 250 at the source. fsyncs = "
              "fsync-family calls (fsync, fdatasync, syncfs, sync_file_range) per message, counted in the timed runs by "
              "`perf stat` on the syscall tracepoints of the relay's cgroup (where that is not possible: a separate "
              "strace pass, which slows the relay and so shrinks its batches). Flushes, writes and KB: "
              "/proc/diskstats of the whole disk per message. CPU = the relay's process tree "
              "(cgroup cpuacct) per 1000 messages; source and sink CPU = the load generator's (smx-source, or smtp-source) and "
              "the next hop's (smx-sink), which share the machine's cores with the relay. PSS = peak "
              "proportional set size of the relay.", ""]
    for tag, per_sys in summary.items():
        lines += ["## %s" % tag, "",
                  "| system | N | complete | delivered msgs/s [min–max] | inject msgs/s | ack p50 ms | "
                  "ack p99 ms | fsyncs/msg | flushes/msg | writes/msg | KB/msg | CPU s/1000 msgs | "
                  "source CPU s/1000 | sink CPU s/1000 | peak PSS MB | errors |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for name, s in per_sys.items():
            lines.append("| %s | %d | %d/%d | %s [%s–%s] |" % (
                name, s["msgs"], s["complete"], s["runs"], fmt(s["delivered"]), fmt(s["min"]), fmt(s["max"]))
                         + " %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d |" % (
                fmt(s["inject"]), fmt(s["p50"], 1), fmt(s["p99"], 1), fmt(s["fsyncs"], 2), fmt(s["flushes"], 2),
                fmt(s["writes"], 2), fmt(s["kb"], 1), fmt(s["cpu"], 2), fmt(s["source_cpu"], 2),
                fmt(s["sink_cpu"], 2), fmt(s["pss"]), s["errors"]))
        lines.append("")
        pairs = ratios(per_sys)
        if pairs:
            lines += ["Ratios of delivered msgs/s: " + ", ".join("%s/%s %.2f" % p for p in pairs) + ".", ""]
        for name, s in per_sys.items():
            if s["ibdb_commits_per_1000"] is not None:
                lines += ["%s: %s IBDB commits per 1000 messages (`smx stats`)." % (
                    name, fmt(s["ibdb_commits_per_1000"])), ""]
        emulated = [(name, s) for name, s in per_sys.items() if s["emulated_flushes"] is not None]
        if emulated:
            lines += ["Slow-disk lab, emulated flushes of %g ms: emulated flushes per message (the device "
                      "flushes of that disk): " % emulated[0][1]["flush_delay_ms"] +
                      ", ".join("%s %s" % (name, fmt(s["emulated_flushes"], 3)) for name, s in emulated) + ".", ""]
    lines += scaling_markdown(scaled or [])
    if crosscheck:
        lines += ["## Cross-check with postfix's smtp-source", "",
                  "| path | tool | sessions | msgs | seconds | msgs/s | source CPU s/1000 |",
                  "|---|---|---|---|---|---|---|"]
        for c in crosscheck:
            lines.append("| %s | %s | %s | %d | %.2f | %.0f | %s |" % (
                c["path"], c["tool"], c.get("sessions", 100), c["msgs"], c["seconds"], c["msgs_per_s"],
                fmt(c.get("source_cpu_s_per_1000"), 2)))
        lines.append("")
    return "\n".join(lines)


def plots(outdir, summary):
    """throughput.png and latency.png: one group of bars per configuration."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    tags = list(summary)
    systems = []
    for per_sys in summary.values():
        systems += [s for s in per_sys if s not in systems]
    width = 0.8 / max(1, len(systems))
    made = []
    # p99 first and wide, p50 in front of it: both stay visible.
    for fname, keys, ylabel in (("throughput.png", ("delivered",), "delivered msgs/s (median, min–max)"),
                                ("latency.png", ("p99", "p50"), "ack latency ms (p50 solid, p99 hatched)")):
        fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(tags) * max(1, len(systems)) / 2), 4.5))
        for i, name in enumerate(systems):
            xs = [t + (i - (len(systems) - 1) / 2) * width for t in range(len(tags))]
            for k, key in enumerate(keys):
                vals = [summary[t].get(name, {}).get(key) or 0 for t in tags]
                kw = {"color": "C%d" % i, "label": name if k == 0 else None}
                if key == "delivered":
                    lo = [v - (summary[t].get(name, {}).get("min") or 0) for t, v in zip(tags, vals)]
                    hi = [(summary[t].get(name, {}).get("max") or 0) - v for t, v in zip(tags, vals)]
                    kw["yerr"] = [lo, hi]
                    kw["capsize"] = 3
                if key == "p99":
                    kw.update(hatch="//", alpha=0.45)
                ax.bar(xs, vals, width * (0.5 if key == "p50" else 0.9), **kw)
        ax.set_xticks(range(len(tags)))
        ax.set_xticklabels(tags, rotation=20, ha="right", fontsize=8)
        ax.set_ylabel(ylabel)
        if fname == "latency.png":
            ax.set_yscale("log")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(outdir, fname), dpi=110)
        plt.close(fig)
        made.append(fname)
    return made
