"""Resource figures of a relay: CPU and peak memory of its whole process
tree (a cpuacct cgroup when we may create one, else a /proc walk), device
I/O from /proc/diskstats, and fsync-family calls: counted in the timed run
by `perf stat` on the syscall tracepoints of the relay's cgroup v2 group
(no cost to the relay), else by strace in a separate pass."""
import os
import re
import shutil
import signal
import subprocess
import threading
import time

CGROOT = "/sys/fs/cgroup/cpuacct"
# The cgroup v2 hierarchy perf's -G finds (the unified one under a v1 layout).
CG2ROOTS = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
TICK = os.sysconf("SC_CLK_TCK")
SYNC_CALLS = ("fsync", "fdatasync", "syncfs", "sync_file_range")


class ProcessGroup:
    """The processes of one relay. With a cgroup, every descendant counts,
    also the ones that daemonize or double-fork (sendmail's delivery
    processes) and would escape a walk of the process tree."""

    def __init__(self, name, cpus=None):
        """cpus: the CPU numbers the relay's processes may run on (as
        `taskset -c`), or None for all."""
        self.name = "smxbench-%s-%d" % (name, os.getpid())
        self.path = os.path.join(CGROOT, self.name)
        self.cpus = cpus
        self.roots = []
        try:
            os.makedirs(self.path, exist_ok=True)
            self.cgroup = True
        except OSError:
            self.cgroup = False
        # The same processes in a cgroup v2 group too, for perf stat -G.
        self.v2 = None
        for root in CG2ROOTS:
            if os.path.exists(os.path.join(root, "cgroup.controllers")):
                try:
                    os.makedirs(os.path.join(root, self.name), exist_ok=True)
                    self.v2 = os.path.join(root, self.name)
                except OSError:
                    pass
                break

    def cgroup_paths(self):
        """The groups the relay's processes join: cpuacct (v1) and v2."""
        return ([self.path] if self.cgroup else []) + ([self.v2] if self.v2 else [])

    def preexec(self):
        """For subprocess: the started process joins the group before exec,
        pinned to cpus; its descendants inherit both."""
        if self.cpus:
            os.sched_setaffinity(0, self.cpus)
        for path in self.cgroup_paths():
            with open(os.path.join(path, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))

    def pids(self):
        if self.cgroup:
            with open(os.path.join(self.path, "cgroup.procs")) as f:
                return [int(x) for x in f.read().split()]
        return _tree(self.roots)

    def cpu_seconds(self):
        if self.cgroup:
            with open(os.path.join(self.path, "cpuacct.usage")) as f:
                return int(f.read()) / 1e9
        total = 0
        for pid in self.pids():
            st = _stat(pid)
            if st:  # utime stime cutime cstime: reaped children included
                total += sum(int(x) for x in st[11:15]) / TICK
        return total

    def remove(self):
        for path in self.cgroup_paths():
            try:
                os.rmdir(path)
            except OSError:
                pass  # still has processes: the next run reuses it


def process_cpu_seconds(pid):
    """User + system CPU of one live process, its threads included."""
    st = _stat(pid)
    return sum(int(x) for x in st[11:13]) / TICK if st else 0.0


def _stat(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _tree(roots):
    children = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = _stat(int(d))
            if st:
                children.setdefault(int(st[1]), []).append(int(d))
    out, todo = [], list(roots)
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def pss_bytes(pids):
    """Proportional set size: shared pages split among the sharers, so a
    sum over hundreds of forked smtpd/sendmail processes is honest."""
    total = 0
    for pid in pids:
        try:
            with open("/proc/%d/smaps_rollup" % pid) as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
        except OSError:
            pass
    return total


class PeakMemory(threading.Thread):
    """Samples the group's PSS twice a second; .peak is the highest sum."""

    def __init__(self, group, interval=0.5):
        super().__init__(daemon=True)
        self.group, self.interval, self.peak = group, interval, 0
        self._stop_event = threading.Event()

    def run(self):
        while not self._stop_event.is_set():
            if self.group:
                self.peak = max(self.peak, pss_bytes(self.group.pids()))
            self._stop_event.wait(self.interval)

    def stop(self):
        self._stop_event.set()
        self.join()
        return self.peak


def disk_of(path):
    """The whole-disk name in /proc/diskstats for the file system of path
    (flush requests are counted per disk, not per partition)."""
    st = os.stat(path)
    sysdir = os.path.realpath("/sys/dev/block/%d:%d" % (os.major(st.st_dev), os.minor(st.st_dev)))
    if os.path.exists(os.path.join(sysdir, "partition")):
        sysdir = os.path.dirname(sysdir)
    return os.path.basename(sysdir)


def diskstats(disk):
    """writes completed, sectors written, flush requests completed."""
    with open("/proc/diskstats") as f:
        for line in f:
            p = line.split()
            if p[2] == disk:
                flushes = int(p[18]) if len(p) > 18 else 0
                return {"writes": int(p[7]), "sectors": int(p[9]), "flushes": flushes}
    return {"writes": 0, "sectors": 0, "flushes": 0}


def stop_tool(proc, timeout=30):
    """Stops a measuring tool (perf, strace) as ^C would, so that it writes
    its counts; killed if it has not ended within timeout seconds."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class TimedSyncCounter:
    """fsync-family calls of the group's processes during a timed run:
    `perf stat -a -G` on the sys_enter tracepoints, counted in the kernel
    (strace stops the relay at every system call and so changes how it
    batches). None when perf or a cgroup v2 group is missing."""

    def __init__(self, group, out_path):
        self.proc, self.out = None, out_path
        if not group or not group.v2 or not shutil.which("perf"):
            return
        rel = os.path.relpath(group.v2, next(r for r in CG2ROOTS if group.v2.startswith(r + "/")))
        os.makedirs(os.path.dirname(out_path), exist_ok=True)
        events = ",".join("syscalls:sys_enter_" + c for c in SYNC_CALLS)
        # -G applies to each event before it: once per event.
        args = ["perf", "stat", "-a", "-x", ",", "-o", out_path, "-e", events,
                "-G", ",".join([rel] * len(SYNC_CALLS))]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.3)  # perf opens its counters

    def stop(self):
        """{call: count}, or None when not counted."""
        if not self.proc:
            return None
        stop_tool(self.proc)
        calls = {}
        try:
            with open(self.out) as f:
                for line in f:
                    p = line.strip().split(",")
                    if len(p) > 2 and p[2].startswith("syscalls:sys_enter_") and p[0].isdigit():
                        calls[p[2][len("syscalls:sys_enter_"):]] = int(p[0])
        except OSError:
            return None
        return calls if set(calls) == set(SYNC_CALLS) else None


class SyncCounter:
    """strace -f -c on every process of the group: counts fsync, fdatasync,
    syncfs and sync_file_range calls. Used in a separate, untimed pass (strace slows the
    relay down)."""

    def __init__(self, group, out_path):
        self.out = out_path
        args = ["strace", "-f", "-c", "-e", "trace=fsync,fdatasync,syncfs,sync_file_range", "-o", out_path]
        pids = group.pids()
        for pid in pids:
            args += ["-p", str(pid)]
        # strace reports every attach (also of each forked child) on stderr:
        # into a file, since a pipe nobody drains would fill up and stop
        # strace and with it every traced process.
        self.log = log_path = out_path + ".log"
        with open(log_path, "w") as err:
            self.proc = subprocess.Popen(args, stderr=err)
        wanted, end = len(pids), time.time() + 10
        while time.time() < end and self.proc.poll() is None:
            with open(log_path) as f:
                if f.read().count("attached") >= wanted:
                    break
            time.sleep(0.05)
        time.sleep(0.2)

    def stop(self):
        stop_tool(self.proc)
        os.remove(self.log)
        calls = {c: 0 for c in SYNC_CALLS}
        try:
            with open(self.out) as f:
                for line in f:
                    m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(fsync|fdatasync|syncfs|sync_file_range)\s*$", line)
                    if m:
                        calls[m.group(2)] += int(m.group(1))
        except OSError:
            pass
        return calls
