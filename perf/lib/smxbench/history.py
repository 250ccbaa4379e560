"""perf/history.jsonl, the benchmark history: one JSON line per system x
configuration x run, summarised from a perf tool's result directory
(`perf/history add DIR`). The raw runs stay outside the tree; a row says
where they are (`raw`) and which commit was measured (`commit`)."""
import json
import os
import re
import statistics
import subprocess

from . import report
from .env import PERF
from .runner import SUITES, size_bytes, tag_of

DATASET = os.path.join(PERF, "history.jsonl")
# The systems of relay-bench in the order its --systems default names them.
PEERS = ("direct", "smx", "postfix", "sendmail")


def read(path):
    """The dataset's rows in the order they were added (none if it does not exist)."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def add(dirs, dataset, commit=None):
    """Appends the rows of every result directory; all or none: a directory
    that is not a perf tool's, or a run already in the dataset, appends
    nothing. Returns {dir: rows}."""
    have = {(r["bench"], r["run"]) for r in read(dataset)}
    found = {}
    for d in dirs:
        rows = rows_of(d, commit)
        taken = {(r["bench"], r["run"]) for r in rows} & have
        if taken:
            raise ValueError("%s: already in %s (%s)" % (d, dataset, ", ".join("%s %s" % t for t in sorted(taken))))
        have |= {(r["bench"], r["run"]) for r in rows}
        found[d] = rows
    with open(dataset, "a") as f:
        for rows in found.values():
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n")
    return found


def rows_of(path, commit=None):
    """The dataset rows of one result directory, by the files its tool wrote."""
    path = os.path.normpath(path)
    j = _json(os.path.join(path, "run.json")) or {}
    kind = next((kind for kind, key in (("relay-bench", "summary"), ("commit-sweep", "sweep"),
                                        ("crash-run", "kills"), ("qmgr-restart", "deferred"),
                                        ("idle-conns", "results")) if key in j), None)
    if kind is None and os.path.isfile(os.path.join(path, "runs.jsonl")):
        kind = "content-store"
    elif kind is None and os.path.isfile(os.path.join(path, "raw", "profile.json")):
        kind, j = "profile", _json(os.path.join(path, "raw", "profile.json"))
    elif kind is None:
        raise ValueError("%s: not the results of a perf tool (no run.json, runs.jsonl or raw/profile.json)" % path)
    base = _base(path, kind, j, commit)
    return [_clean(r) for r in ROWS[kind](base, j, path)]


def _json(path):
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)


def _text(path):
    if not os.path.isfile(path):
        return ""
    with open(path) as f:
        return f.read()


def _git(path, *args):
    r = subprocess.run(["git", "-C", path] + list(args), capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else ""


def _base(path, kind, j, commit):
    """What every row of a run has: which run, when, which commit, on what."""
    name = os.path.basename(path)
    added = _git(path, "log", "--diff-filter=A", "--reverse", "--abbrev=7", "--format=%h %ad",
                 "--date=format:%Y-%m-%d %H:%M", "--", ".").splitlines()
    added_commit, added_date = added[0].split(" ", 1) if added else (None, None)
    # A directory checked in (the history before perf/history.jsonl): its
    # files are at the commit that added them.
    raw = "%s:%s" % (added_commit, _git(path, "rev-parse", "--show-prefix")) if added else os.path.abspath(path)
    m = re.match(r"(\d{4}-\d\d-\d\d)(?:-(\d\d)(\d\d)(?!\d))?", name)
    named = m and (m[1] + (" %s:%s" % (m[2], m[3]) if m[2] else ""))
    facts = j.get("machine") or {}
    load = facts.get("loadavg_at_start") or j.get("load_average")
    return {"bench": kind, "run": name,
            "date": j.get("date") or (named if named and m[2] else None) or added_date or named,
            # The run's own record first (the checkout it ran from), then
            # --commit, then the commit that checked the directory in.
            "commit": j.get("commit") or j.get("source_tree") or commit or added_commit,
            "machine": _machine(facts) if facts else None, "load": load[0] if load else None,
            "command": j.get("command") or COMMANDS[kind](j, path), "raw": raw}


def _machine(f):
    text = "%s cores %s, %s MB" % (f["cores"], f["cpu_model"], f["memory_mb"]) if "cores" in f else ""
    return ", ".join(x for x in (text, "%s on %s" % (f["filesystem"], f["device"]),
                                 "kernel " + f["kernel"] if "kernel" in f else "") if x)


def _sig(x):
    """Numbers to 4 significant digits, whole numbers from 1000 on: the runs
    vary far more than that, and the dataset stays small."""
    if isinstance(x, float):
        v = float(round(x)) if abs(x) >= 1000 else float("%.4g" % x)
        return int(v) if v.is_integer() else v
    if isinstance(x, dict):
        return {k: _sig(v) for k, v in x.items()}
    return x


def _clean(row):
    return {k: _sig(v) for k, v in row.items() if v is not None and v != {}}


# relay-bench (and commit-sweep's store experiments): report.summarize's
# figures under the dataset's names.
FIGURES = (("runs", "runs"), ("complete", "complete"), ("msgs", "msgs"), ("delivered", "msgs_per_s"),
           ("min", "msgs_per_s_min"), ("max", "msgs_per_s_max"), ("inject", "inject_msgs_per_s"),
           ("p50", "ack_p50_ms"), ("p99", "ack_p99_ms"), ("fsyncs", "fsyncs_per_msg"),
           ("flushes", "flushes_per_msg"), ("writes", "writes_per_msg"), ("kb", "kb_per_msg"),
           # CPU s per 1000 messages is ms per message.
           ("cpu", "cpu_ms_per_msg"), ("source_cpu", "source_cpu_ms_per_msg"),
           ("sink_cpu", "sink_cpu_ms_per_msg"), ("milter_cpu", "milter_cpu_ms_per_msg"), ("pss", "pss_mb"),
           ("errors", "errors"),
           ("ibdb_commits_per_1000", "ibdb_commits_per_1000"), ("emulated_flushes", "emulated_flushes_per_msg"),
           ("flush_delay_ms", "flush_delay_ms"))


def _suite_rows(base, summary, extra, versions=None, paired=None):
    rows = []
    for tag, per_sys in summary.items():
        vs = {}
        for a, b, value in report.ratios(per_sys):
            vs.setdefault(a, {})[b] = value
        for name, s in per_sys.items():
            row = dict(base, **extra, config=tag, system=name, version=(versions or {}).get(name))
            row.update({key: s.get(k) for k, key in FIGURES})
            if parse_tag(tag)[3] is not None:  # 0 ms too: the real disk inside the slow-disk lab
                row["flush_delay_ms"] = float(parse_tag(tag)[3])
            row.update(vs=vs.get(name), paired=(paired or {}).get((name, tag)))
            rows.append(row)
    return rows


def _scaling_tag(s):
    """report.scaling's "1K, 10 rcpts, 2 ms flushes" at s["sessions"] as a tag."""
    m = re.fullmatch(r"(\S+), (\d+) rcpts?(?:, ([\d.]+) ms flushes)?", s["config"])
    cfg = {"size": m[1], "sessions": s["sessions"], "rcpts": int(m[2])}
    if m[3] is not None:
        cfg["flush_delay"] = float(m[3])
    return tag_of(cfg)


def relay_rows(base, j, path):
    paired = {(s["system"], _scaling_tag(s)): {k: s[k] for k in ("base", "ratio", "min", "max", "pairs")}
              for s in j.get("scaling", [])}
    return _suite_rows(base, j["summary"], {"suite": j.get("suite"), "generator": j.get("load_generator",
                                                                                         "smx-source")},
                       j.get("versions"), paired)


def parse_tag(tag):
    """runner.tag_of's name of a configuration: (size, sessions, rcpts, flush
    delay or None), as strings."""
    m = re.fullmatch(r"(.+)-s(\d+)-r(\d+)(?:-d([\d.]+)ms)?", tag)
    return m[1], m[2], m[3], m[4]


def tag_order(tag):
    """Sorts configurations by size, sessions, recipients and flush delay."""
    size, sessions, rcpts, delay = parse_tag(tag)
    return size_bytes(re.split(r"[_:,]", size)[0]), int(sessions), int(rcpts), float(delay or 0)


def _ordered(values):
    return list(dict.fromkeys(values))


def relay_command(j, path):
    """The relay-bench command line of a run that did not record its own:
    what its record implies (suite, systems, axes, reps, scale, generator).
    How a variant smx-NAME was defined is in the run's configs/."""
    suite = j.get("suite", "quick")
    args = ["perf/relay-bench", "--" + suite]
    names = list(j.get("versions", {})) + list(j.get("skipped", {}))
    plain = _ordered(n.split("+")[0].split("@")[0] for n in names)
    plain = [n for n in PEERS if n in plain] + sorted(n for n in plain if n not in PEERS)
    if plain != list(PEERS):
        args += ["--systems", ",".join(plain)]
    tags = [parse_tag(t) for t in sorted(j["summary"], key=tag_order)]
    for i, (flag, key) in enumerate((("--sizes", "sizes"), ("--sessions", "sessions"), ("--rcpts", "rcpts"))):
        values = _ordered(t[i] for t in tags)
        if values != SUITES[suite]["axes"][key].split(","):
            args += [flag, ",".join(values)]
    reps = max(s["runs"] for per_sys in j["summary"].values() for s in per_sys.values())
    if reps != 3:
        args += ["--reps", str(reps)]
    counts = SUITES[suite]["msgs"]
    exact, bound = [], []
    for tag, per_sys in j["summary"].items():
        for name, s in per_sys.items():
            scale = s["msgs"] / counts.get(name.split("+")[0].split("@")[0], counts["smx"])
            # A count raised to 3 per session only bounds the scale.
            (bound if s["msgs"] <= 3 * int(parse_tag(tag)[1]) else exact).append(scale)
    scale = exact[0] if exact else min(bound)
    if round(scale, 2) != 1:
        args += ["--scale", "%g" % round(scale, 2)]
    if j.get("load_generator", "smx-source") != "smx-source":
        args += ["--source", j["load_generator"]]
    if any("+tls" in n for n in names):
        args.append("--tls")
    if any("+policy" in n for n in names):
        args.append("--policy")
    for cpus in _ordered(n.split("@")[1] for n in names if "@" in n):
        args += ["--cpus", cpus]
    delays = _ordered(t[3] for t in tags if t[3] is not None)
    if delays:
        args += ["--flush-delay", ",".join(delays)]
    if not j.get("crosscheck"):
        args.append("--no-crosscheck")
    return " ".join(args)


def _raw_suite(path, keep):
    """The timed runs of runner.suite under raw/ whose names pass keep(), with
    the fsyncs per message of their strace pass, saved apart."""
    raw = os.path.join(path, "raw")
    results, straced = [], {}
    for name in sorted(os.listdir(raw)) if os.path.isdir(raw) else []:
        if not name.endswith(".json") or not keep(name):
            continue
        if name.endswith("-strace.json"):
            straced[name[:-len("-strace.json")]] = _json(os.path.join(raw, name))["per_msg"]
        else:
            results.append(_json(os.path.join(raw, name)))
    for r in results:
        r.setdefault("fsyncs_per_msg", straced.get("%s-%s" % (r["tag"], r["system"])))
    return sorted(results, key=lambda r: r["rep"])


def sweep_rows(base, j, path):
    md = _text(os.path.join(path, "results.md"))
    delay = j.get("flush_delay_ms")
    if delay is None:  # older runs said it in results.md only
        m = re.search(r"emulated device flush of ([\d.]+) ms", md)
        delay = float(m[1]) if m else 0
    rows = []
    for p in j["sweep"]:
        policy = p.get("policy", "fixed")
        config = "s%d-%s" % (p["sessions"], "default" if policy == "default" else "ci%d-b%d" % (
            p["commit_interval_us"], p["commit_max_batch"]))
        rows.append(dict(base, config=config, system="smx", sessions=p["sessions"], policy=policy,
                         commit_interval_us=p["commit_interval_us"], commit_max_batch=p["commit_max_batch"],
                         flush_delay_ms=delay, msgs=p["msgs"], complete=p["complete"],
                         commits_per_1000=p["commits_per_1000"], transactions_per_commit=p["transactions_per_commit"],
                         msgs_per_s=p["msgs_per_s"], inject_msgs_per_s=p.get("inject_msgs_per_s"),
                         ack_p50_ms=p["p50"], ack_p99_ms=p["p99"], flushes_per_msg=p["flushes_per_msg"],
                         emulated_flushes_per_msg=p.get("emulated_flushes_per_msg"), errors=p["errors"]))
    stores = _raw_suite(path, lambda n: not n.startswith("sweep-"))
    if stores:
        rows += _suite_rows(dict(base, bench="store-experiment"), report.summarize(stores), {})
    return rows


def sweep_command(j, path):
    args = ["perf/commit-sweep"]
    fixed = [p for p in j["sweep"] if p.get("policy", "fixed") == "fixed"]
    if j["sweep"]:
        md = _text(os.path.join(path, "results.md"))
        args += ["--msgs", str(min(j["sweep"], key=lambda p: p["sessions"])["msgs"])]
        m = re.search(r"median of (\d+) run", md)
        if m and m[1] != "1":
            args += ["--point-reps", m[1]]
        args += ["--intervals", ",".join(_ordered(str(p["commit_interval_us"]) for p in fixed)),
                 "--batches", ",".join(_ordered(str(p["commit_max_batch"]) for p in fixed)),
                 "--sessions", ",".join(_ordered(str(p["sessions"]) for p in j["sweep"]))]
        m = re.search(r"emulated device flush of ([\d.]+) ms", md)
        if m:
            args += ["--flush-delay", m[1]]
    else:
        args.append("--no-sweep")
    stores = _raw_suite(path, lambda n: not n.startswith("sweep-"))
    if stores:
        if not j["sweep"]:
            args += ["--msgs", str(stores[0]["config"]["msgs"])]
        args += ["--store", ",".join(_ordered(r["system"] for r in stores))]
        reps = max(r["rep"] for r in stores) + 1
        if reps != 3:
            args += ["--reps", str(reps)]
    else:
        args.append("--no-store")
    return " ".join(args)


def crash_rows(base, j, path):
    c = j["config"]
    return [dict(base, system="smx", config="%d msgs, %d sessions, %d kills, %s" % (
        c["messages"], c["sessions"], c["kills"], c["size"]),
        messages=c["messages"], sessions=c["sessions"], kills=c["kills"], size=c["size"], rate=c["rate"],
        seed=c["seed"], attempted=j["attempted"], accepted=j["accepted"], refused=j["refused"],
        no_reply=j["no_reply"], lost=j["lost"], delivered_without_250=j["delivered_without_250"],
        duplicates=j["duplicates"], duplicates_in_flight=j["duplicates_in_flight"],
        kills_by_victim=j["kills_by_victim"],
        kills_during={w: sum(k["during"] == w for k in j["kills"]) for w in ("intake", "delivery", "idle")},
        restart_s_max=j["restart_s_max"], load_s=j["load_s"], drain_s=j["drain_s"],
        orphans_quarantined=j["orphan_cdb_quarantined"], envelopes_without_content=j["envelopes_without_content"],
        cdb_left=j["cdb_left"], ibdb_left=j["ibdb_left"], defedb_entries=j["defedb_entries"])]


def crash_command(j, path):
    c = j["config"]
    return "perf/crash-run --messages %d --sessions %d --kills %d --size %s --rate %s --seed %d --gap %s" % (
        c["messages"], c["sessions"], c["kills"], c["size"], c["rate"], c["seed"], c["gap"])


def qmgr_rows(base, j, path):
    row = dict(base, system="smx-qmgr", config="%d deferred" % j["deferred"], deferred=j["deferred"],
               messages=j["messages"], rcpts=j["rcpts"], defedb_mb=j["defedb_mb"], fill_s=j["fill_s"],
               starts=len(j["runs"]))
    for key in ("first_answer_ms", "counted_ms", "rss_mb"):
        values = [r[key] for r in j["runs"]]
        row.update({key: j["median"][key], key + "_min": min(values), key + "_max": max(values)})
    return [row]


def qmgr_command(j, path):
    return "perf/qmgr-restart --messages %d --rcpts %d --runs %d" % (j["messages"], j["rcpts"], len(j["runs"]))


def idle_rows(base, j, path):
    rows = []
    for r in j["results"]:
        p = r["per_conn"]
        rows.append(dict(base, system="smx", config="%d conns" % r["conns"], conns=r["conns"], greeted=r["greeted"],
                         failed=r["failed"], smtps_processes=r.get("smtps_processes"),
                         rss_kb_per_conn=p["rss"] / 1024, pss_kb_per_conn=p.get("pss", 0) / 1024 or None,
                         kernel_kb_per_conn=p.get("kernel_sockmem", 0) / 1024,
                         greeting_ms=statistics.median(r["greeting_ms"]), greeting_ms_max=max(r["greeting_ms"]),
                         transaction_ms=statistics.median(r["transaction_ms"]),
                         transaction_ms_max=max(r["transaction_ms"]), nofile_hard=r.get("nofile_hard")))
    return rows


def idle_command(j, path):
    return "perf/idle-conns --conns %s --probes %d" % (",".join(str(r["conns"]) for r in j["results"]),
                                                       len(j["results"][0]["greeting_ms"]))


def content_rows(base, j, path):
    with open(os.path.join(path, "runs.jsonl")) as f:
        runs = [json.loads(line) for line in f if line.strip()]
    if not base["machine"]:  # older runs said it in results.md only
        m = re.search(r" on (\S+) \(([^)]+)\), load at start ([\d.]+)", _text(os.path.join(path, "results.md")))
        if m:
            base = dict(base, machine="%s on %s" % (m[1], m[2]), load=float(m[3]))
    rows = []
    for size in _ordered(r["size_arg"] for r in runs):
        for design in _ordered(r["design"] for r in runs):
            rs = [r for r in runs if r["size_arg"] == size and r["design"] == design]
            rate = [r["msgs_per_s"] for r in rs]
            rows.append(dict(base, config=size, system=design, runs=len(rs), msgs=rs[0]["msgs"],
                             batch=rs[0]["batch"], msgs_per_s=statistics.median(rate), msgs_per_s_min=min(rate),
                             msgs_per_s_max=max(rate),
                             process_cpu_ms_per_msg=statistics.median(r["process_cpu_ms_per_msg"] for r in rs),
                             machine_cpu_ms_per_msg=statistics.median(r["machine_cpu_ms_per_msg"] for r in rs)))
    return rows


def content_command(j, path):
    m = re.search(r"`(perf/content-store[^`]*)`", _text(os.path.join(path, "results.md")))
    return m[1] if m else None


def profile_rows(base, j, path):
    timed = j["timed"]
    cfg = timed[0]["result"]["config"]
    # perf/profile --milter KIND: a configuration of its own.
    milter = j.get("milter")
    base = dict(base, config="%s-s%d%s" % (cfg["size"], cfg["sessions"], "-milter-" + milter if milter else ""),
                msgs=cfg["msgs"], runs=len(timed))
    med = statistics.median
    rows = [dict(base, system="relay", cpu_ms_per_msg=med(t["result"]["cpu_s_per_1000"] for t in timed),
                 msgs_per_s=med(t["result"]["delivered_msgs_per_s"] for t in timed))]
    if milter:
        rows.append(dict(base, system="milter",
                         cpu_ms_per_msg=med(t["result"]["milter_cpu_s_per_1000"] or 0.0 for t in timed)))
    allocs, calls = j.get("mallocs_per_msg", {}), j.get("syscalls_per_msg", {})
    for name in sorted({n for t in timed for n in t["per_process_ms"]}):
        per = [t["per_process_ms"].get(name, (0.0, 0.0)) for t in timed]
        sw = [t.get("per_process_switches", {}).get(name) for t in timed]
        sw = [s for s in sw if s]
        rows.append(dict(base, system=name, cpu_ms_per_msg=med(sum(p) for p in per),
                         user_ms_per_msg=med(p[0] for p in per), sys_ms_per_msg=med(p[1] for p in per),
                         voluntary_switches_per_msg=med(s[0] for s in sw) if sw else None,
                         involuntary_switches_per_msg=med(s[1] for s in sw) if sw else None,
                         mallocs_per_msg=allocs.get(name),
                         syscalls_per_msg=sum(calls[name].values()) if name in calls else None))
        share = j.get("perf_top", {}).get(name, {}).get("milter")
        if share:  # the milter client's part of smx-smtps (perf/profile --milter)
            rows[-1].update(milter_code_ms_per_msg=share["share"] * rows[-1]["cpu_ms_per_msg"],
                            milter_code_user_ms_per_msg=(share["share"] - share["kernel_share"]) *
                            rows[-1]["cpu_ms_per_msg"])
    return rows


def profile_command(j, path):
    cfg = j["timed"][0]["result"]["config"]
    return "perf/profile -n %d -s %d -S %s --reps %d%s" % (cfg["msgs"], cfg["sessions"], cfg["size"], len(j["timed"]),
                                                         " --milter " + j["milter"] if j.get("milter") else "")


ROWS = {"relay-bench": relay_rows, "commit-sweep": sweep_rows, "crash-run": crash_rows, "qmgr-restart": qmgr_rows,
        "idle-conns": idle_rows, "content-store": content_rows, "profile": profile_rows}
COMMANDS = {"relay-bench": relay_command, "commit-sweep": sweep_command, "crash-run": crash_command,
            "qmgr-restart": qmgr_command, "idle-conns": idle_command, "content-store": content_command,
            "profile": profile_command}
