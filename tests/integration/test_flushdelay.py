"""The slow-disk lab's shim (perf/flushdelay.c, relay-bench --flush-delay):
real processes with libsmx-flushdelay.so preloaded call the real sync calls
on a real file; their waits and the shared counters show that emulated
flushes are shared by callers waiting together and serialized machine-wide."""
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import BUILD, REPO, SANITIZED

sys.path.insert(0, os.path.join(REPO, "perf", "lib"))
from smxbench.flushlab import FlushLab  # noqa: E402

# A caller: opens its own file, says "ready", waits for a line on stdin, then
# makes its sync call from `threads` threads at once and prints when each
# began and ended (CLOCK_MONOTONIC, the clock the shim's deadlines use).
CALLER = r"""
import ctypes, json, os, sys, threading, time
op, path, threads = sys.argv[1], sys.argv[2] + "-%d" % os.getpid(), int(sys.argv[3])
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
os.write(fd, b"x" * 4096)
libc = ctypes.CDLL(None, use_errno=True)
libc.sync_file_range.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
WRITE, WAIT_AFTER = 2, 4
calls = {
    "fdatasync": lambda: os.fdatasync(fd),
    "fsync": lambda: os.fsync(fd),
    "syncfs": lambda: libc.syncfs(fd),
    "sync_file_range": lambda: libc.sync_file_range(fd, 0, 0, WRITE | WAIT_AFTER),
    "sync_file_range_nowait": lambda: libc.sync_file_range(fd, 0, 0, WRITE),
}
out = []
def one():
    t0 = time.clock_gettime(time.CLOCK_MONOTONIC)
    calls[op]()
    out.append((t0, time.clock_gettime(time.CLOCK_MONOTONIC)))
print("ready", flush=True)
sys.stdin.readline()
ts = [threading.Thread(target=one) for _ in range(threads)]
for t in ts: t.start()
for t in ts: t.join()
print(json.dumps(out), flush=True)
"""


# perf/meson.build builds the shim only without sanitizers (it is preloaded
# into postfix and sendmail, which lack the sanitizer runtime); the normal
# build's run tests it.
pytestmark = pytest.mark.skipif(SANITIZED, reason="the slow-disk shim is not built in sanitizer builds")

@pytest.fixture
def lab(request):
    labs = []

    def make(delay_ms):
        labs.append(FlushLab(BUILD, delay_ms))
        return labs[-1]
    yield make
    for lab in labs:
        lab.close()


class Caller:
    def __init__(self, lab, tmp_path, op="fdatasync", threads=1, env=None, user=None):
        e = dict(os.environ, **(lab.env() if env is None else env))
        self.proc = subprocess.Popen(
            # Debian's python3 for another user: sys.executable may be under /root.
            [sys.executable if user is None else "/usr/bin/python3", "-c", CALLER, op, str(tmp_path / "data"), str(threads)], env=e,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=(lambda: (os.setgid(user), os.setuid(user))) if user is not None else None)
        assert self.proc.stdout.readline().strip() == "ready", self.proc.stderr.read()

    def go(self):
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()

    def times(self):
        out, err = self.proc.communicate(timeout=30)
        assert self.proc.returncode == 0, err
        return json.loads(out)


# The flushes last long against the time a loaded machine may take to wake
# the callers told to go together (8 processes: a tenth of a second and
# more at a load of 10 on 2 cores): the counts, not the clock, show the
# sharing, and only lower bounds are asserted on the clock.
def test_callers_waiting_together_share_one_flush(lab, tmp_path):
    d = 0.4
    device = lab(400)
    callers = [Caller(device, tmp_path) for _ in range(8)]
    for c in callers:
        c.go()
    times = [t for c in callers for t in c.times()]
    assert len(times) == 8
    # Each waits a whole flush at least; together they take about 1-2 flushes,
    # not 8 (the first starts one, the others arrive during it and share the next).
    assert all(end - start >= d for start, end in times)
    assert device.counters()["calls"] == 8
    assert device.counters()["flushes"] <= 3


def test_threads_of_one_process_share_too(lab, tmp_path):
    device = lab(200)
    c = Caller(device, tmp_path, threads=6)
    c.go()
    times = c.times()
    assert len(times) == 6 and all(e - s >= 0.2 for s, e in times)
    assert device.counters()["calls"] == 6 and device.counters()["flushes"] <= 3


def test_flushes_are_serialized_across_processes(lab, tmp_path):
    d = 0.5
    device = lab(500)
    a, b = Caller(device, tmp_path), Caller(device, tmp_path)
    a.go()
    time.sleep(0.1)
    b.go()
    (a0, a1), = a.times()
    (b0, b1), = b.times()
    # B came while A's flush ran: it waits for that one to end, then for
    # a whole next one. Two callers one after the other take two flushes.
    assert b0 < a1, "B did not arrive during A's flush (a loaded machine?)"
    assert a1 - a0 >= d
    assert b1 - a0 >= 2 * d
    assert b1 - b0 > d
    assert device.counters() == {"flushes": 2, "calls": 2}


@pytest.mark.parametrize("op", ["fsync", "syncfs", "sync_file_range"])
def test_every_sync_call_waits(lab, tmp_path, op):
    device = lab(30)
    c = Caller(device, tmp_path, op=op)
    c.go()
    (s, e), = c.times()
    assert e - s >= 0.03
    assert device.counters() == {"flushes": 1, "calls": 1}


def test_sync_file_range_without_wait_after_passes_through(lab, tmp_path):
    device = lab(5000)  # a wait would take 5 s, passing through far under 1
    c = Caller(device, tmp_path, op="sync_file_range_nowait")
    c.go()
    (s, e), = c.times()
    assert e - s < 1.0
    assert device.counters() == {"flushes": 0, "calls": 0}


def test_zero_delay_is_pass_through(lab, tmp_path):
    device = lab(0)
    env = {"LD_PRELOAD": device.lib, "SMX_FLUSH_DELAY_MS": "0", "SMX_FLUSH_SHM": device.path}
    c = Caller(device, tmp_path, env=env)
    c.go()
    assert len(c.times()) == 1
    assert device.counters() == {"flushes": 0, "calls": 0}


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a caller as another user")
def test_a_caller_of_another_user_shares_the_device(lab, tmp_path):
    device = lab(50)
    # pytest's tmp_path is out of nobody's reach.
    shared = tempfile.mkdtemp(prefix="smx-flushlab-test-")
    try:
        os.chmod(shared, 0o777)
        root = Caller(device, pathlib.Path(shared))
        other = Caller(device, pathlib.Path(shared), user=65534)
        root.go()
        other.go()
        assert len(root.times()) == 1 and len(other.times()) == 1
    finally:
        shutil.rmtree(shared)
    assert device.counters()["calls"] == 2


@pytest.mark.parametrize("env,message", [
    ({"SMX_FLUSH_DELAY_MS": "5"}, "SMX_FLUSH_SHM is not"),
    ({"SMX_FLUSH_DELAY_MS": "soon", "SMX_FLUSH_SHM": "/nonexistent"}, "must be a number"),
    ({"SMX_FLUSH_DELAY_MS": "5", "SMX_FLUSH_SHM": "/nonexistent/device"}, "cannot open"),
])
def test_a_bad_setting_stops_the_process_with_a_clear_error(lab, env, message):
    device = lab(0)
    e = {k: v for k, v in os.environ.items() if not k.startswith("SMX_FLUSH")}
    e.update(env, LD_PRELOAD=device.lib)
    res = subprocess.run(["/bin/true"], env=e, capture_output=True, text=True, timeout=30)
    assert res.returncode != 0
    assert res.stderr.startswith("libsmx-flushdelay: ") and message in res.stderr
