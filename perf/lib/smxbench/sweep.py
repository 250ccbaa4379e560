"""commit-sweep: table and plot of the group-commit knobs' effect."""
import os
import statistics


def point(res, interval, batch, sessions):
    """One sweep row from a timed run and its `smx stats` deltas."""
    d = res.get("smx_stats_delta", {})
    msgs = res["config"]["msgs"]
    commits, tas = d.get("ibdb_commits"), d.get("ibdb_transactions")
    return {
        "commit_interval_us": interval, "commit_max_batch": batch, "sessions": sessions,
        "msgs": msgs, "complete": res["complete"],
        "commits_per_1000": commits / msgs * 1000 if commits is not None else None,
        "transactions_per_commit": tas / commits if commits else None,
        "msgs_per_s": res["delivered_msgs_per_s"], "inject_msgs_per_s": res["inject_msgs_per_s"],
        "p50": res["latency_ms"].get("p50"), "p99": res["latency_ms"].get("p99"),
        "flushes_per_msg": res["flushes_per_msg"], "errors": sum(res["errors"].values()),
    }


def median_point(points):
    """One row from the runs of a point: the median of every figure."""
    row = dict(points[0])
    for key, value in row.items():
        if isinstance(value, float) or value is None:
            vals = [p[key] for p in points if p[key] is not None]
            row[key] = statistics.median(vals) if vals else None
    row["complete"] = all(p["complete"] for p in points)
    row["errors"] = sum(p["errors"] for p in points)
    return row


def fmt(v, d=1):
    return "n/a" if v is None else ("%%.%df" % d) % v


def markdown(rows):
    lines = ["| sessions | commit_max_batch | commit_interval_us | IBDB commits / 1000 msgs | "
             "transactions / commit | delivered msgs/s | ack p50 ms | ack p99 ms | flushes/msg | errors |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append("| %d | %d | %d | %s | %s | %s | %s | %s | %s | %d |" % (
            r["sessions"], r["commit_max_batch"], r["commit_interval_us"], fmt(r["commits_per_1000"], 0),
            fmt(r["transactions_per_commit"], 2), fmt(r["msgs_per_s"], 0), fmt(r["p50"]), fmt(r["p99"]),
            fmt(r["flushes_per_msg"], 2), r["errors"]))
    return "\n".join(lines) + "\n"


def plot(outdir, rows):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    series = sorted({(r["sessions"], r["commit_max_batch"]) for r in rows})
    for i, (sessions, batch) in enumerate(series):
        pts = sorted((r for r in rows if (r["sessions"], r["commit_max_batch"]) == (sessions, batch)),
                     key=lambda r: r["commit_interval_us"])
        # 0 µs cannot sit on a log axis: drawn at 10 µs and labelled so.
        xs = [max(r["commit_interval_us"], 10) for r in pts]
        label = "%d sessions, batch %d" % (sessions, batch)
        for ax, key in zip(axes, ("commits_per_1000", "msgs_per_s", "p99")):
            ax.plot(xs, [r[key] or 0 for r in pts], marker="o", color="C%d" % i, label=label)
    for ax, title in zip(axes, ("IBDB commits per 1000 msgs", "delivered msgs/s", "ack latency p99 ms")):
        ax.set_xscale("log")
        ax.set_xlabel("commit_interval_us (0 drawn at 10)")
        ax.set_title(title)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, "commit-sweep.png"), dpi=110)
    plt.close(fig)
    return "commit-sweep.png"
