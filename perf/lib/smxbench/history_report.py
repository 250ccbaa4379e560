"""The current tables of docs/benchmarks.md and the history plots, made from
perf/history.jsonl (perf/history report).

A document asks for a table with a pair of markers; everything between
them is replaced:

    <!-- perf/history NAME key=value ... -->
    <!-- end perf/history -->

NAME is one of TABLES; each takes the newest run in the dataset that fits
it, so a new run appears once `perf/history add` has recorded it."""
import os
import re

from .history import PEERS, parse_tag, tag_order

MARK = re.compile(r"^(<!-- perf/history (?P<spec>[^>]*?) -->\n).*?(?=^<!-- end perf/history -->$)", re.S | re.M)


def fill(text, rows):
    """text with every marked table made anew from rows."""
    if len(re.findall(r"^<!-- perf/history ", text, re.M)) != len(MARK.findall(text)):
        raise ValueError("a <!-- perf/history ... --> line without its <!-- end perf/history --> line")
    return MARK.sub(lambda m: m[1] + render(m["spec"], rows), text)


def render(spec, rows):
    name, *params = spec.split()
    if name not in TABLES:
        raise ValueError("perf/history %s: no such table (known: %s)" % (name, ", ".join(TABLES)))
    try:
        args = dict(p.split("=", 1) for p in params)
    except ValueError:
        raise ValueError("perf/history %s: parameters are key=value, not %r" % (name, " ".join(params)))
    return TABLES[name](rows, **args)


def fmt(v, digits=0):
    return "n/a" if v is None else "%.*f" % (digits, v)


def spread(r):
    """A row's msgs/s median [min–max]."""
    if r.get("msgs_per_s_min") is None:
        return fmt(r.get("msgs_per_s"))
    return "%s [%s–%s]" % (fmt(r["msgs_per_s"]), fmt(r["msgs_per_s_min"]), fmt(r["msgs_per_s_max"]))


def table(header, lines):
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] +
                     ["| " + " | ".join(str(x) for x in line) + " |" for line in lines]) + "\n"


def runs(rows, bench):
    """{run: its rows} of one benchmark, newest run first (of two with the
    same date, the one added later)."""
    out = {}
    for r in rows:
        if r["bench"] == bench:
            out.setdefault(r["run"], []).append(r)
    order = {run: i for i, run in enumerate(out)}
    return dict(sorted(out.items(), key=lambda kv: (kv[1][0]["date"], order[kv[0]]), reverse=True))


def source(run_rows):
    """Where the figures of a table come from: run, date, commit, load, command."""
    r = run_rows[0]
    raw = "`git show %s`" % r["raw"] if re.match(r"[0-9a-f]{7}:", r["raw"]) else "`%s`" % r["raw"]
    return "\nRun `%s`, %s, commit %s%s: `%s`; raw files: %s.\n" % (
        r["run"], r["date"], r["commit"], ", load average %s at start" % fmt(r["load"], 1) if "load" in r else "",
        r["command"], raw)


def by(run_rows, config):
    """{system: row} of one configuration."""
    return {r["system"]: r for r in run_rows if r["config"] == config}


def relay(rows, systems=",".join(PEERS), configs="1K-s100-r1,1K-s1000-r1", subject="smx"):
    """Per load generator, the newest relay-bench run with every one of
    `systems` in one of `configs`: msgs/s, the subject's ratios to the
    others and its CPU, fsyncs, flushes and ack p99."""
    systems, configs = systems.split(","), configs.split(",")
    subject = subject if subject in systems else systems[0]
    others = [s for s in systems if s != subject]
    picked = {}
    for run_rows in runs(rows, "relay-bench").values():
        gen = run_rows[0].get("generator", "smx-source")
        if gen not in picked and any(set(systems) <= set(by(run_rows, c)) for c in configs):
            picked[gen] = run_rows
    lines, notes = [], ""
    for gen, run_rows in sorted(picked.items()):
        for config in configs:
            s = by(run_rows, config)
            if not set(systems) <= set(s):
                continue
            me = s[subject]
            lines.append([gen, config] + [spread(s[n]) if n == subject else fmt(s[n]["msgs_per_s"]) for n in systems]
                         + [fmt(me.get("vs", {}).get(n), 2) for n in others]
                         + [fmt(me.get("cpu_ms_per_msg"), 2), fmt(me.get("fsyncs_per_msg"), 2),
                            fmt(me.get("flushes_per_msg"), 2), fmt(me.get("ack_p99_ms"), 1)])
        notes += source(run_rows)
    header = (["generator", "configuration"] + ["%s msgs/s" % n for n in systems] +
              ["%s/%s" % (subject, n) for n in others] +
              ["%s %s" % (subject, f) for f in ("CPU ms/msg", "fsyncs/msg", "flushes/msg", "ack p99 ms")])
    return table(header, lines) + notes


def paired(rows, systems=",".join(PEERS)):
    """Per load generator, the newest run with session counts paired by
    round for every one of `systems`: each one's N ÷ base ratio."""
    systems = systems.split(",")
    picked = {}
    for run_rows in runs(rows, "relay-bench").values():
        gen = run_rows[0].get("generator", "smx-source")
        with_pairs = {r["system"] for r in run_rows if "paired" in r}
        if gen not in picked and set(systems) <= with_pairs:
            picked[gen] = run_rows
    lines, notes = [], ""
    for gen, run_rows in sorted(picked.items()):
        for config in sorted({r["config"] for r in run_rows if "paired" in r}, key=tag_order):
            s = by(run_rows, config)
            p = s[systems[0]]["paired"]
            lines.append([gen, "%s ÷ %d sessions" % (config, p["base"])] + [
                "%.2f [%.2f–%.2f]" % (s[n]["paired"]["ratio"], s[n]["paired"]["min"], s[n]["paired"]["max"])
                if "paired" in s.get(n, {}) else "n/a" for n in systems] + [p["pairs"]])
        notes += source(run_rows)
    return table(["generator", "configuration"] + systems + ["rounds"], lines) + notes


def full(rows):
    """The newest run of the whole matrix: smx per configuration."""
    run_rows = next((rr for rr in runs(rows, "relay-bench").values() if rr[0].get("suite") == "full"), None)
    if run_rows is None:
        return "(no relay-bench --full run in the dataset)\n"
    others = [n for n in PEERS if n != "smx"]
    lines = []
    for config in sorted({r["config"] for r in run_rows}, key=tag_order):
        me = by(run_rows, config).get("smx")
        if me:
            lines.append([config, fmt(me["msgs_per_s"])] + [fmt(me.get("vs", {}).get(n), 2) for n in others] +
                         [fmt(me.get("fsyncs_per_msg"), 2), fmt(me.get("flushes_per_msg"), 2),
                          fmt(me.get("cpu_ms_per_msg"), 2), fmt(me.get("ack_p99_ms"), 1)])
    header = (["configuration", "smx msgs/s"] + ["smx/%s" % n for n in others] +
              ["fsyncs/msg", "flushes/msg", "CPU ms/msg", "ack p99 ms"])
    return table(header, lines) + source(run_rows)


# Which run a `systems` table shows: the newest that has a system like this.
KINDS = {"tls": ("relay-bench", lambda name: name.endswith("+tls")),
         "cpus": ("relay-bench", lambda name: "@" in name),
         "stores": ("store-experiment", lambda name: True)}


def systems(rows, kind):
    """Every system of the newest run of a kind (TLS, pinned CPUs, the store
    experiments), one line each."""
    bench, fits = KINDS[kind]
    run_rows = next((rr for rr in runs(rows, bench).values() if any(fits(r["system"]) for r in rr)), None)
    if run_rows is None:
        return "(no such run in the dataset)\n"
    lines = [[r["config"], r["system"], r["msgs"], spread(r), fmt(r.get("ack_p50_ms"), 1), fmt(r.get("ack_p99_ms"), 1),
              fmt(r.get("fsyncs_per_msg"), 2), fmt(r.get("flushes_per_msg"), 2), fmt(r.get("cpu_ms_per_msg"), 2),
              fmt(r.get("pss_mb"))] for r in sorted(run_rows, key=lambda r: tag_order(r["config"]))]
    ratios = ", ".join("%s/%s %.2f" % (r["system"], b, v) for r in run_rows for b, v in r.get("vs", {}).items())
    return (table(["configuration", "system", "N", "msgs/s [min–max]", "ack p50 ms", "ack p99 ms", "fsyncs/msg",
                   "flushes/msg", "CPU ms/msg", "peak PSS MB"], lines)
            + ("\nRatios of msgs/s: %s.\n" % ratios if ratios else "") + source(run_rows))


def undelayed(config):
    """A configuration's name without its emulated flush delay."""
    return re.sub(r"-d[\d.]+ms$", "", config)


def slowdisk(rows):
    """The newest run of the slow-disk lab: every system at each emulated
    flush delay, and the share of its 0 ms figure it keeps."""
    run_rows = next((rr for rr in runs(rows, "relay-bench").values()
                     if len({r.get("flush_delay_ms") for r in rr} - {None}) > 1), None)
    if run_rows is None:
        return "(no relay-bench --flush-delay run in the dataset)\n"
    zero = {(undelayed(r["config"]), r["system"]): r["msgs_per_s"] for r in run_rows if r["flush_delay_ms"] == 0}
    lines = []
    for r in sorted(run_rows, key=lambda r: (tag_order(r["config"])[:3], r["system"], r["flush_delay_ms"])):
        base = zero.get((undelayed(r["config"]), r["system"]))
        lines.append([undelayed(r["config"]), r["system"], fmt(r["flush_delay_ms"]), spread(r),
                      "%.0f%%" % (100 * r["msgs_per_s"] / base) if base else "n/a", fmt(r.get("ack_p50_ms"), 1),
                      fmt(r.get("ack_p99_ms"), 1), fmt(r.get("emulated_flushes_per_msg"), 3),
                      fmt(r.get("flushes_per_msg"), 3)])
    return table(["configuration", "system", "flush ms", "msgs/s [min–max]", "of 0 ms", "ack p50 ms", "ack p99 ms",
                  "emulated flushes/msg", "flushes/msg"], lines) + source(run_rows)


def sweeps(rows, delay, sessions):
    """The newest commit sweep with emulated flushes of `delay` ms (0: the
    real disk) that has the default policy at every session count given."""
    return newest(rows, "commit-sweep", lambda rr: rr[0].get("flush_delay_ms", 0) == delay and set(sessions) <= {
        r["sessions"] for r in rr if r["policy"] == "default"})


def commit_sweep(rows, delays="0,2", sessions="10,100,1000"):
    """The default commit policy against the best fixed point at each session
    count, in the newest sweep on the real disk (0) and on each emulated
    flush delay."""
    counts = [int(n) for n in sessions.split(",")]
    lines, notes = [], ""
    for delay in [float(d) for d in delays.split(",")]:
        run_rows = sweeps(rows, delay, counts)
        if run_rows is None:
            continue
        for n in counts:
            default, best = default_and_best(run_rows, n)
            lines.append([fmt(delay), n] + [fmt(default[k], d) for k, d in FIGURES_OF_POINT] +
                         ["%d µs × %d" % (best["commit_interval_us"], best["commit_max_batch"])] +
                         [fmt(best[k], d) for k, d in FIGURES_OF_POINT] +
                         ["%.0f%%" % (100 * default["msgs_per_s"] / best["msgs_per_s"])])
        notes += source(run_rows)
    figures = ["msgs/s", "IBDB commits/1000 msgs", "ack p99 ms"]
    return table(["flush ms", "sessions"] + ["default: " + f for f in figures] +
                 ["best fixed point (interval × batch)"] + ["its " + f for f in figures] +
                 ["default ÷ best"], lines) + notes


FIGURES_OF_POINT = (("msgs_per_s", 0), ("commits_per_1000", 0), ("ack_p99_ms", 1))


def default_and_best(run_rows, sessions):
    """At a session count of a sweep: the default policy's point and the
    fastest fixed point."""
    at = [r for r in run_rows if r["sessions"] == sessions]
    return (next(r for r in at if r["policy"] == "default"),
            max((r for r in at if r["policy"] == "fixed"), key=lambda r: r["msgs_per_s"]))


def crash(rows):
    """The newest crash run of each length (messages and kills), side by side."""
    picked = {}
    for rr in runs(rows, "crash-run").values():
        picked.setdefault((rr[0]["messages"], rr[0]["kills"]), rr)
    picked = sorted(picked.values(), key=lambda rr: -rr[0]["messages"])
    rs = [rr[0] for rr in picked]
    figures = (
        ("messages, sessions, kills, size", lambda r: "%d, %d, %d, %s" % (r["messages"], r["sessions"], r["kills"],
                                                                         r["size"])),
        ("attempted / accepted (250)", lambda r: "%d / %d" % (r["attempted"], r["accepted"])),
        ("refused (451) / no reply after DATA", lambda r: "%d / %d" % (r["refused"], r["no_reply"])),
        ("**lost**", lambda r: "**%d**" % r["lost"]),
        ("delivered without a 250", lambda r: r["delivered_without_250"]),
        ("duplicates (in flight at a QMGR/SMTPC kill)", lambda r: "%d (%d)" % (r["duplicates"],
                                                                              r["duplicates_in_flight"])),
        ("kills: qmgr / smtps / smtpc / all", lambda r: "%d / %d / %d / %d" % tuple(
            r["kills_by_victim"].get(v, 0) for v in ("qmgr", "smtps", "smtpc", "all"))),
        ("kills during intake / delivery / idle", lambda r: "%d / %d / %d" % tuple(
            r["kills_during"].get(w, 0) for w in ("intake", "delivery", "idle"))),
        ("longest kill → all back, s", lambda r: fmt(r["restart_s_max"], 1)),
        ("intake / drain after the last kill, s", lambda r: "%s / %s" % (fmt(r["load_s"]), fmt(r["drain_s"], 1))),
        ("orphan content files quarantined", lambda r: r["orphans_quarantined"]),
        ("envelopes quarantined at recovery, content missing", lambda r: r["envelopes_without_content"]),
        ("content files / IBDB files / DEFEDB entries left", lambda r: "%d / %d / %d" % (
            r["cdb_left"], r["ibdb_left"], r["defedb_entries"])))
    lines = [[label] + [get(r) for r in rs] for label, get in figures]
    return table(["figure"] + ["`%s`" % r["run"] for r in rs], lines) + "".join(source(rr) for rr in picked)


def qmgr_restart(rows):
    """The newest timing of QMGR's start over a large DEFEDB."""
    run_rows = next(iter(runs(rows, "qmgr-restart").values()), None)
    if run_rows is None:
        return "(no qmgr-restart run in the dataset)\n"
    r = run_rows[0]
    lines = [[label, fmt(r[key]), fmt(r[key + "_min"]), fmt(r[key + "_max"])]
             for key, label in (("first_answer_ms", "exec to first `smx stats` answer, ms"),
                                ("counted_ms", "exec to DEFEDB count complete, ms"), ("rss_mb", "QMGR RSS then, MB"))]
    return ("%d deferred recipients in %d messages, DEFEDB %d MB, filled in %.1f s; %d starts.\n\n" % (
        r["deferred"], r["messages"], r["defedb_mb"], r["fill_s"], r["starts"])
        + table(["figure", "median", "min", "max"], lines) + source(run_rows))


def idle(rows):
    """The newest idle-connection run."""
    run_rows = next(iter(runs(rows, "idle-conns").values()), None)
    if run_rows is None:
        return "(no idle-conns run in the dataset)\n"
    lines = [[r["conns"], r["greeted"], r["failed"], r.get("smtps_processes", "n/a"), fmt(r["rss_kb_per_conn"], 1),
              fmt(r.get("pss_kb_per_conn"), 1), "%s / %s" % (fmt(r["greeting_ms"], 1), fmt(r["greeting_ms_max"], 1)),
              "%s / %s" % (fmt(r["transaction_ms"], 1), fmt(r["transaction_ms_max"], 1))] for r in run_rows]
    return table(["connections", "idle", "failed", "smx-smtps processes", "RSS KB/conn", "PSS KB/conn",
                  "new client 220 ms (median / max)", "transaction ms (median / max)"], lines) + source(run_rows)


def content_store(rows, count="2"):
    """The newest `count` content-store runs: files against segments."""
    picked = list(runs(rows, "content-store").values())[:int(count)]
    lines = []
    for rr in picked:
        for size in sorted({r["config"] for r in rr}, key=lambda c: tag_order(c + "-s1-r1")):
            d = by(rr, size)
            f, s = d.get("files"), d.get("segment")
            if f and s:
                lines.append([rr[0]["run"], rr[0].get("machine", "n/a"), size, "%s → %s" % (
                    fmt(f["msgs_per_s"]), fmt(s["msgs_per_s"])), "%s → %s" % (
                    fmt(f["process_cpu_ms_per_msg"], 3), fmt(s["process_cpu_ms_per_msg"], 3)), "%s → %s" % (
                    fmt(f["machine_cpu_ms_per_msg"], 3), fmt(s["machine_cpu_ms_per_msg"], 3))])
    return table(["run", "file system", "size", "msgs/s, files → segment", "process CPU ms/msg",
                  "machine CPU ms/msg"], lines) + "".join(source(rr) for rr in picked)


def profile(rows):
    """The newest profile: CPU, context switches, mallocs and system calls
    per message of each of smx's processes; then the newest with a milter
    (perf/profile --milter), a configuration of its own."""
    plain = newest(rows, "profile", lambda rr: "-milter-" not in rr[0].get("config", ""))
    milter = newest(rows, "profile", lambda rr: "-milter-" in rr[0].get("config", ""))
    if plain is None and milter is None:
        return "(no profile run in the dataset)\n"
    out = []
    for run_rows in (plain, milter):
        if run_rows is None:
            continue
        lines = [[r["system"], fmt(r["cpu_ms_per_msg"], 3), fmt(r.get("user_ms_per_msg"), 3),
                  fmt(r.get("sys_ms_per_msg"), 3), "%s / %s" % (fmt(r.get("voluntary_switches_per_msg"), 2),
                                                                fmt(r.get("involuntary_switches_per_msg"), 2)),
                  fmt(r.get("mallocs_per_msg"), 1), fmt(r.get("syscalls_per_msg"), 1)] for r in run_rows]
        out.append(table(["process", "CPU ms/msg", "user", "sys", "context switches/msg (voluntary / involuntary)",
                          "malloc calls/msg", "system calls/msg"], lines) + source(run_rows))
    return "\n".join(out)


def newest(rows, bench, fits):
    """The rows of the newest run of bench for which fits(its rows) holds."""
    return next((rr for rr in runs(rows, bench).values() if fits(rr)), None)


def targets(rows):
    """Issue 11's targets (and issue 4's crash target) against the newest run
    that measures each."""
    out = []

    def add(label, goal, value, met, run_rows, digits=2):
        if run_rows is not None and value is not None:
            out.append([label, goal, value if isinstance(value, str) else fmt(value, digits),
                        "—" if met is None else ("yes" if met else "**no**"), "`%s`" % run_rows[0]["run"]])

    for gen in ("smtp-source", "smx-source"):
        rr = newest(rows, "relay-bench", lambda rr: rr[0].get("generator", "smx-source") == gen
                    and set(PEERS) <= set(by(rr, "1K-s100-r1")))
        s = by(rr or [], "1K-s100-r1")
        smx = s.get("smx", {})
        for peer, goal in (("postfix", 6), ("sendmail", 20), ("direct", 0.5)):
            v = smx.get("vs", {}).get(peer)
            add("1 KB, 100 sessions (%s): smx ÷ %s" % (gen, peer), "≥ %g" % goal, v, v is not None and v >= goal, rr)
        for key, label, goal in (("cpu_ms_per_msg", "relay CPU ms per message", 0.30),
                                 ("flushes_per_msg", "device flushes per message", 0.10),
                                 ("fsyncs_per_msg", "fsync calls per message", 0.15)):
            v = smx.get(key)
            add("1 KB, 100 sessions (%s): %s" % (gen, label), "≤ %.2f" % goal, v, v is not None and v <= goal, rr)
        if gen == "smx-source":  # smtp-source times no acknowledgements
            p99 = by(rr or [], "1K-s1000-r1").get("smx", {}).get("ack_p99_ms")
            add("1000 sessions (%s): smx ack p99 ms" % gen, "≤ 100", p99, p99 is not None and p99 <= 100, rr, 1)
        rr = newest(rows, "relay-bench", lambda rr: rr[0].get("generator", "smx-source") == gen
                    and any("paired" in r and r["system"] == "smx" for r in rr))
        p = next((r["paired"] for r in rr or [] if "paired" in r and r["system"] == "smx"), None)
        if p:
            add("1000 ÷ 100 sessions (%s), paired by round: smx" % gen, "≥ 1.00",
                "%.2f [%.2f–%.2f]" % (p["ratio"], p["min"], p["max"]), p["ratio"] >= 1, rr)
    # -d0ms: the real disk in a run of the slow-disk lab
    at10 = lambda rr: by(rr, "1K-s10-r1").get("smx") or by(rr, "1K-s10-r1-d0ms").get("smx")  # noqa: E731
    rr = newest(rows, "relay-bench", at10)
    v = (at10(rr) or {}).get("fsyncs_per_msg") if rr else None
    add("1 KB, 10 sessions: fsync calls per message", "≤ 0.3", v, v is not None and v <= 0.3, rr)
    rr = newest(rows, "relay-bench", lambda rr: {"1K-s100-r1-d0ms", "1K-s100-r1-d2ms"} <= {
        r["config"] for r in rr if r["system"] == "smx"})
    if rr:
        zero, two = by(rr, "1K-s100-r1-d0ms")["smx"], by(rr, "1K-s100-r1-d2ms")["smx"]
        share = two["msgs_per_s"] / zero["msgs_per_s"]
        add("emulated 2 ms flushes, 100 sessions: smx's share of its 0 ms msgs/s", "≥ 80%", "%.0f%%" % (100 * share),
            share >= 0.8, rr)
    rr = newest(rows, "idle-conns", lambda rr: any(r["conns"] >= 50000 for r in rr))
    r = max(rr or [{}], key=lambda r: r.get("conns", 0))
    if rr:
        add("50,000 idle connections: KB each", "≤ 12", r["rss_kb_per_conn"], r["rss_kb_per_conn"] <= 12, rr, 1)
        add("50,000 idle connections: a new client's 220, median ms", "< 100", r["greeting_ms"],
            r["greeting_ms"] < 100, rr, 1)
    for delay in (0, 2):
        rr = sweeps(rows, delay, (10, 100, 1000))
        if rr:
            shares = []
            for n in (10, 100, 1000):
                default, best = default_and_best(rr, n)
                shares.append("%.0f%% at %d" % (100 * default["msgs_per_s"] / best["msgs_per_s"], n))
            add("default commit policy ÷ best fixed point, %g ms flushes (sessions)" % delay,
                "within noise", ", ".join(shares), None, rr)
    crashes = runs(rows, "crash-run")
    if crashes:
        latest = next(iter(crashes.values()))
        lost = sum(rr[0]["lost"] for rr in crashes.values())
        add("crash-run: messages lost that got a 250", "0", "%d (%d in all %d runs)" % (latest[0]["lost"], lost,
                                                                                     len(crashes)),
            latest[0]["lost"] == 0 and lost == 0, latest)
    return table(["target", "goal", "newest", "met", "run"], out)


TABLES = {"targets": targets, "relay": relay, "paired": paired, "full": full, "systems": systems,
          "slowdisk": slowdisk, "commit-sweep": commit_sweep, "crash-run": crash, "qmgr-restart": qmgr_restart,
          "idle-conns": idle, "content-store": content_store, "profile": profile}


def plots(rows, outdir):
    """The history as PNGs in outdir: every relay-bench run at 1 KB and 100
    sessions over time (msgs/s of each system, smx's ratios, its CPU and
    fsyncs per message). [] without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    import datetime
    os.makedirs(outdir, exist_ok=True)
    when = lambda r: datetime.datetime.strptime((r["date"] + " 00:00")[:16], "%Y-%m-%d %H:%M")  # noqa: E731
    at100 = sorted((r for r in rows if r["bench"] == "relay-bench" and r["config"] == "1K-s100-r1"), key=when)
    marks = {"smx-source": "o", "smtp-source": "x"}
    made = []

    def series(ax, pick, label, colour):
        for gen, mark in marks.items():
            pts = [(when(r), v) for r in at100 if r.get("generator", "smx-source") == gen
                   for v in [pick(r)] if v is not None]
            if pts:
                ax.plot(*zip(*pts), marker=mark, linestyle="-", linewidth=0.6, color=colour,
                        label="%s (%s)" % (label, gen))

    for fname, ylabel, log, lines in (
            ("relay-msgs-per-s.png", "delivered msgs/s, 1 KB, 100 sessions (median)", True,
             [(lambda r, n=n: r["msgs_per_s"] if r["system"] == n else None, n) for n in PEERS]),
            ("relay-ratios.png", "smx msgs/s ÷ the peer's, same run", True,
             [(lambda r, n=n: r.get("vs", {}).get(n) if r["system"] == "smx" else None, "smx/" + n)
              for n in ("postfix", "sendmail", "direct")]),
            ("relay-cost.png", "smx per message: CPU ms, fsync calls", False,
             [(lambda r: r.get("cpu_ms_per_msg") if r["system"] == "smx" else None, "CPU ms"),
              (lambda r: r.get("fsyncs_per_msg") if r["system"] == "smx" else None, "fsyncs")])):
        fig, ax = plt.subplots(figsize=(10, 4.5))
        for i, (pick, label) in enumerate(lines):
            series(ax, pick, label, "C%d" % i)
        ax.set_ylabel(ylabel)
        if log:
            ax.set_yscale("log")
        ax.legend(fontsize=7)
        fig.autofmt_xdate()
        fig.tight_layout()
        path = os.path.join(outdir, fname)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        made.append(path)
    return made
