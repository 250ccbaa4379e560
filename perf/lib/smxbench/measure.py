"""Resource figures of a relay: CPU and peak memory of its whole process
tree (a cpuacct cgroup when we may create one, else a /proc walk), device
I/O from /proc/diskstats, and fsync-family calls counted by strace."""
import os
import re
import signal
import subprocess
import threading
import time

CGROOT = "/sys/fs/cgroup/cpuacct"
TICK = os.sysconf("SC_CLK_TCK")


class ProcessGroup:
    """The processes of one relay. With a cgroup, every descendant counts,
    also the ones that daemonize or double-fork (sendmail's delivery
    processes) and would escape a walk of the process tree."""

    def __init__(self, name, cpus=None):
        """cpus: the CPU numbers the relay's processes may run on (as
        `taskset -c`), or None for all."""
        self.path = os.path.join(CGROOT, "smxbench-%s-%d" % (name, os.getpid()))
        self.cpus = cpus
        self.roots = []
        try:
            os.makedirs(self.path, exist_ok=True)
            self.cgroup = True
        except OSError:
            self.cgroup = False

    def preexec(self):
        """For subprocess: the started process joins the group before exec,
        pinned to cpus; its descendants inherit both."""
        if self.cpus:
            os.sched_setaffinity(0, self.cpus)
        if self.cgroup:
            with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
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
        if self.cgroup:
            try:
                os.rmdir(self.path)
            except OSError:
                pass  # still has processes: the next run reuses it


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
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.remove(self.log)
        calls = {"fsync": 0, "fdatasync": 0, "syncfs": 0, "sync_file_range": 0}
        try:
            with open(self.out) as f:
                for line in f:
                    m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(fsync|fdatasync|syncfs|sync_file_range)\s*$", line)
                    if m:
                        calls[m.group(2)] += int(m.group(1))
        except OSError:
            pass
        return calls
