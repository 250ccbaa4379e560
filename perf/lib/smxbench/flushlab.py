"""The slow-disk lab: perf/flushdelay.c (libsmx-flushdelay.so) preloaded
into every system under test, all sharing one emulated device whose flushes
last `delay_ms` each. This side makes the shared file and reads its counters."""
import os
import shutil
import struct
import subprocess
import tempfile

SHM_SIZE = 4096  # >= the shim's struct shared, zero-filled


def library(build):
    return os.path.join(build, "perf", "libsmx-flushdelay.so")


def ensure_built(build):
    """The shim is not among env.TOOLS: only --flush-delay needs it."""
    if subprocess.run(["ninja", "-C", build, "-j2", "perf/libsmx-flushdelay.so"],
                      stdout=subprocess.DEVNULL).returncode != 0:
        raise SystemExit("the slow-disk lab's shim does not build (ninja -C %s perf/libsmx-flushdelay.so)" % build)


class FlushLab:
    """One emulated device: a private directory under /dev/shm holding the
    shared file, mode 0666 so that processes of any user (postfix's
    children run as postfix) can wait on it."""

    def __init__(self, build, delay_ms):
        self.lib = library(build)
        if not os.access(self.lib, os.R_OK):
            raise RuntimeError("%s is not built (ninja -C %s perf/libsmx-flushdelay.so)" % (self.lib, build))
        self.delay_ms = delay_ms
        self.dir = tempfile.mkdtemp(prefix="smx-flushlab-", dir="/dev/shm")
        os.chmod(self.dir, 0o711)  # others may open the file by name, not list the directory
        self.path = os.path.join(self.dir, "device")
        with open(self.path, "wb") as f:
            f.write(b"\0" * SHM_SIZE)
        os.chmod(self.path, 0o666)

    def env(self):
        """The variables every process of a system under test needs."""
        if not self.delay_ms:
            return {}
        pre = os.environ.get("LD_PRELOAD")
        return {"LD_PRELOAD": self.lib + (" " + pre if pre else ""),
                "SMX_FLUSH_DELAY_MS": str(self.delay_ms), "SMX_FLUSH_SHM": self.path}

    def counters(self):
        """{"flushes": emulated flushes started, "calls": sync calls that waited}."""
        with open(self.path, "rb") as f:
            flushes, calls = struct.unpack("<QQ", f.read(16))
        return {"flushes": flushes, "calls": calls}

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def parse_delays(text):
    """--flush-delay's comma list of milliseconds, e.g. "0,1,4"."""
    delays = []
    for part in text.split(","):
        try:
            d = float(part)
        except ValueError:
            raise SystemExit("--flush-delay: %r is not a number of ms" % part)
        if not 0 <= d <= 10000:
            raise SystemExit("--flush-delay: %g ms is outside 0..10000" % d)
        delays.append(int(d) if d == int(d) else d)
    return delays


def markdown(summary):
    """The slow-disk table: per configuration and system, delivered msgs/s
    and flushes per message at each flush delay, and the share of the 0 ms
    throughput kept (summary as report.summarize makes it, tags ending in
    -d<ms>ms)."""
    rows = {}
    for tag, per_sys in summary.items():
        base, _, delay = tag.rpartition("-d")
        if not delay.endswith("ms"):
            continue
        for name, s in per_sys.items():
            rows.setdefault((base, name), {})[float(delay[:-2])] = s
    if not rows:
        return ""
    lines = ["## Slow-disk lab: emulated flush delay", "",
             "Every system under the same LD_PRELOAD shim (perf/flushdelay.c): after each real sync call a "
             "process waits for the next emulated device flush of D ms; flushes are serialized machine-wide and "
             "callers waiting together share one. Emulated flushes/msg = flushes of that device per message.", "",
             "| configuration | system | flush delay ms | delivered msgs/s | of 0 ms | ack p50 ms | ack p99 ms | "
             "emulated flushes/msg | real flushes/msg |",
             "|---|---|---|---|---|---|---|---|---|"]
    for (base, name), by_delay in rows.items():
        zero = by_delay.get(0.0, {}).get("delivered")
        for delay in sorted(by_delay):
            s = by_delay[delay]
            kept = "%.0f%%" % (100 * s["delivered"] / zero) if zero and s["delivered"] is not None else "n/a"
            emu = s.get("emulated_flushes")
            lines.append("| %s | %s | %g | %s | %s | %s | %s | %s | %s |" % (
                base, name, delay, _fmt(s["delivered"], 0), kept, _fmt(s["p50"], 1), _fmt(s["p99"], 1),
                _fmt(emu, 3), _fmt(s["flushes"], 3)))
    return "\n".join(lines) + "\n"


def _fmt(v, digits):
    return "n/a" if v is None else ("%%.%df" % digits) % v
