"""commit-sweep: table and plot of the group-commit knobs' effect."""
import os
import statistics


def point(res, interval, batch, sessions, policy="fixed"):
    """One sweep row from a timed run and its `smx stats` deltas; policy
    "default" (interval and batch None): smx's own defaults."""
    d = res.get("smx_stats_delta", {})
    msgs = res["config"]["msgs"]
    commits, tas = d.get("ibdb_commits"), d.get("ibdb_transactions")
    return {
        "policy": policy, "commit_interval_us": interval, "commit_max_batch": batch, "sessions": sessions,
        "msgs": msgs, "complete": res["complete"],
        "commits_per_1000": commits / msgs * 1000 if commits is not None else None,
        "transactions_per_commit": tas / commits if commits else None,
        "msgs_per_s": res["delivered_msgs_per_s"], "inject_msgs_per_s": res["inject_msgs_per_s"],
        "p50": res["latency_ms"].get("p50"), "p99": res["latency_ms"].get("p99"),
        "flushes_per_msg": res["flushes_per_msg"], "errors": sum(res["errors"].values()),
        "emulated_flushes_per_msg": res.get("emulated_flushes_per_msg"),
    }


def median_point(points):
    """One row from the runs of a point: the median of every figure."""
    row = dict(points[0])
    for key, value in row.items():
        if key in ("commit_interval_us", "commit_max_batch"):
            continue
        if isinstance(value, float) or value is None:
            vals = [p[key] for p in points if p[key] is not None]
            row[key] = statistics.median(vals) if vals else None
    row["complete"] = all(p["complete"] for p in points)
    row["errors"] = sum(p["errors"] for p in points)
    return row


def fmt(v, d=1):
    return "n/a" if v is None else ("%%.%df" % d) % v


def markdown(rows):
    """One table; the default policy's row first in each session count,
    its throughput also as a share of the best fixed point's."""
    lab = any(r.get("emulated_flushes_per_msg") is not None for r in rows)
    lines = ["| sessions | policy | commit_max_batch | commit_interval_us | IBDB commits / 1000 msgs | "
             "transactions / commit | delivered msgs/s | of best fixed | ack p50 ms | ack p99 ms | flushes/msg | " +
             ("emulated flushes/msg | " if lab else "") + "errors |",
             "|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if lab else "") + "---|"]
    best = {}
    for r in rows:
        if r.get("policy", "fixed") == "fixed" and r["msgs_per_s"]:
            best[r["sessions"]] = max(best.get(r["sessions"], 0), r["msgs_per_s"])
    for r in rows:
        default = r.get("policy") == "default"
        share = "%.0f%%" % (100 * r["msgs_per_s"] / best[r["sessions"]]) if best.get(r["sessions"]) else "n/a"
        lines.append("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s%d |" % (
            r["sessions"], "**default**" if default else "fixed",
            "default" if default else r["commit_max_batch"], "default" if default else r["commit_interval_us"],
            fmt(r["commits_per_1000"], 0), fmt(r["transactions_per_commit"], 2), fmt(r["msgs_per_s"], 0), share,
            fmt(r["p50"]), fmt(r["p99"]), fmt(r["flushes_per_msg"], 2),
            fmt(r.get("emulated_flushes_per_msg"), 3) + " | " if lab else "", r["errors"]))
    return "\n".join(lines) + "\n"


def plot(outdir, rows):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    fixed = [r for r in rows if r.get("policy", "fixed") == "fixed"]
    series = sorted({(r["sessions"], r["commit_max_batch"]) for r in fixed})
    colour = {s: "C%d" % i for i, s in enumerate(sorted({r["sessions"] for r in rows}))}
    for r in rows:
        if r.get("policy") == "default":  # a dashed line per session count
            for ax, key in zip(axes, ("commits_per_1000", "msgs_per_s", "p99")):
                ax.axhline(r[key] or 0, color=colour[r["sessions"]], linestyle="--", linewidth=1,
                           label="%d sessions, default policy" % r["sessions"])
    for i, (sessions, batch) in enumerate(series):
        pts = sorted((r for r in fixed if (r["sessions"], r["commit_max_batch"]) == (sessions, batch)),
                     key=lambda r: r["commit_interval_us"])
        # 0 µs cannot sit on a log axis: drawn at 10 µs and labelled so.
        xs = [max(r["commit_interval_us"], 10) for r in pts]
        label = "%d sessions, batch %d" % (sessions, batch)
        for ax, key in zip(axes, ("commits_per_1000", "msgs_per_s", "p99")):
            ax.plot(xs, [r[key] or 0 for r in pts], marker="o" if batch >= 256 else "x", color=colour[sessions],
                    label=label)
    for ax, title in zip(axes, ("IBDB commits per 1000 msgs", "delivered msgs/s", "ack latency p99 ms")):
        ax.set_xscale("log")
        ax.set_xlabel("commit_interval_us (0 drawn at 10)")
        ax.set_title(title)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, "commit-sweep.png"), dpi=110)
    plt.close(fig)
    return "commit-sweep.png"
