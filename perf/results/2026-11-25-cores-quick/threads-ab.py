"""One-off A/B for server.threads: smx with threads=1 and threads=0 (auto),
pinned to 1 and 2 CPUs, interleaved; per process (and per SMTPS thread) the
share of a core used during the timed runs."""
import os, sys, json, statistics, time
ROOT = "/work/wt-cores"
sys.path.insert(0, ROOT + "/perf/lib")
from smxbench import env, runner, systems
from smxbench.measure import disk_of
from smxbench.sink import Sink

TICK = os.sysconf("SC_CLK_TCK")

def ticks(path):
    try:
        st = open(path).read().rsplit(")", 1)[1].split()
        return int(st[11]) + int(st[12])
    except OSError:
        return 0

def snapshot(group):
    out = {}
    for pid in group.pids():
        try:
            comm = open("/proc/%d/comm" % pid).read().strip()
        except OSError:
            continue
        out[comm] = out.get(comm, 0) + ticks("/proc/%d/stat" % pid)
        if comm == "smx-smtps":
            for tid in os.listdir("/proc/%d/task" % pid):
                out["smtps-tid-%s" % tid] = ticks("/proc/%d/task/%s/stat" % (pid, tid))
    return out

build = ROOT + "/build"
work = os.path.join(env.PERF, ".peers", "run-cores")
os.makedirs(work, exist_ok=True)
sink = Sink(os.path.join(build, "perf", "smx-sink"), env.free_port(), None)
bench = runner.Bench(build, sink, disk_of(work), "/tmp/cores/ab")
os.makedirs("/tmp/cores/ab/raw", exist_ok=True)
variants = []
for threads in (1, 0):
    for cpus in ("0", "0,1"):
        s = systems.Smx(work, sink.port, build, overrides={"server": {"threads": threads}},
                        label="smx-t%d" % threads)
        variants.append(systems.pinned(s, cpus))
for v in variants:
    v.setup(env.free_port()); v.start()
cfg = {"size": "1K", "sessions": 100, "rcpts": 1, "msgs": int(sys.argv[1]) if len(sys.argv) > 1 else 3000}
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
res = {v.name: [] for v in variants}
util = {v.name: [] for v in variants}
try:
    for v in variants:
        bench.run(v, dict(cfg, msgs=300))
    for rep in range(reps):
        for v in variants:
            a = snapshot(v.group); t0 = time.time()
            r = bench.run(v, cfg)
            b = snapshot(v.group); dt = time.time() - t0
            res[v.name].append(r["delivered_msgs_per_s"])
            util[v.name].append({k: round((b[k] - a.get(k, 0)) / TICK / dt, 2) for k in b if b[k] - a.get(k, 0) > 0})
            print(v.name, rep, round(r["delivered_msgs_per_s"]), r["cpu_s_per_1000"], util[v.name][-1], flush=True)
finally:
    for v in variants:
        v.stop()
    sink.close()
print("\n| variant | delivered msgs/s median [min-max] | share of a core per process (median rep) |")
print("|---|---|---|")
for v in variants:
    xs = res[v.name]
    med = statistics.median(xs)
    u = util[v.name][xs.index(sorted(xs)[len(xs)//2])]
    print("| %s | %d [%d-%d] | %s |" % (v.name, med, min(xs), max(xs), ", ".join("%s %.2f" % kv for kv in sorted(u.items()))))
