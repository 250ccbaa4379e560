"""The benchmark tools' TLS (perf/relay-bench --tls): smx-sink offers
STARTTLS with --tls-cert/--tls-key, smx-source uses it with --starttls;
checked against each other and against Python's smtplib. perf/idle-conns
end to end at a small scale. relay-bench's timed run with either load
generator, and what relay-bench and perf/profile refuse."""
import json
import os
import re
import shutil
import smtplib
import socket
import ssl
import subprocess
import sys
import time

import pytest

from conftest import BUILD
from test_tls import make_cert

SINK = os.path.join(BUILD, "perf", "smx-sink")
SOURCE = os.path.join(BUILD, "perf", "smx-source")
IDLE_CONNS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                          "perf", "idle-conns")


def start_sink(args):
    proc = subprocess.Popen([SINK, "--port", "0"] + args, stdout=subprocess.PIPE, text=True)
    first = json.loads(proc.stdout.readline())
    assert first["event"] == "listening"
    return proc, first["port"]


def stop_sink(proc):
    proc.terminate()
    out = proc.communicate(timeout=10)[0]
    return json.loads(out.strip().splitlines()[-1])


def source(port, *args):
    res = subprocess.run([SOURCE, "--port", str(port), "--timeout", "10", "--deadline", "60"] + list(args),
                         capture_output=True, text=True, timeout=90)
    return res.returncode, json.loads(res.stdout.strip().splitlines()[-1])


@pytest.fixture
def cert(tmp_path):
    return make_cert(str(tmp_path), "bench")


def test_source_starttls_to_sink(cert):
    proc, port = start_sink(["--tls-cert", cert[0], "--tls-key", cert[1]])
    try:
        rc, rep = source(port, "-n", "20", "-s", "4", "--starttls")
        assert rc == 0 and rep["msgs"] == 20 and rep["errors"] == {}
    finally:
        stats = stop_sink(proc)
    # One message per connection: every session went through TLS.
    assert stats["msgs"] == 20 and stats["tls_sessions"] == 20 == stats["sessions"]


def test_source_refuses_a_sink_without_starttls():
    proc, port = start_sink([])
    try:
        rc, rep = source(port, "-n", "5", "-s", "1", "--starttls", "--max-connect-failures", "2")
    finally:
        stats = stop_sink(proc)
    assert rc == 1 and rep["msgs"] == 0 and rep["errors"].get("starttls") == 3
    assert stats["msgs"] == 0 and stats["tls_sessions"] == 0


def test_source_gives_up_a_connect_at_its_timeout():
    # A listener that never accepts, with its accept queue full: the kernel
    # drops further SYNs, so a connect only ends at smx-source's deadline.
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(0)
    port = lsock.getsockname()[1]
    fillers = []
    try:
        for _ in range(3):
            c = socket.socket()
            c.setblocking(False)
            c.connect_ex(("127.0.0.1", port))
            fillers.append(c)
        time.sleep(0.2)
        started = time.monotonic()
        res = subprocess.run([SOURCE, "--port", str(port), "--timeout", "0.5", "-n", "1", "-s", "1",
                              "--max-connect-failures", "2"],
                             capture_output=True, text=True, timeout=30)
        took = time.monotonic() - started
    finally:
        for c in fillers:
            c.close()
        lsock.close()
    rep = json.loads(res.stdout.strip().splitlines()[-1])
    # Three attempts of 0.5 s with 50 and 100 ms of back-off between them.
    assert res.returncode == 1 and rep["msgs"] == 0
    assert rep["errors"] == {"connect": 3, "gave_up_connecting": 1}
    assert 1.4 < took < 10


def test_sink_starttls_with_smtplib(cert):
    proc, port = start_sink(["--tls-cert", cert[0], "--tls-key", cert[1]])
    try:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        with smtplib.SMTP("127.0.0.1", port, timeout=10) as c:
            c.ehlo("client.test")
            assert c.has_extn("starttls")
            c.starttls(context=ctx)
            assert c.sock.version() in ("TLSv1.2", "TLSv1.3")
            c.ehlo("client.test")
            assert not c.has_extn("starttls")  # offered once, before TLS
            assert c.docmd("STARTTLS")[0] == 502
            c.sendmail("a@source.test", ["b@sink.test"], b"Subject: t\r\n\r\nbody\r\n")
    finally:
        stats = stop_sink(proc)
    assert stats["msgs"] == 1 and stats["tls_sessions"] == 1


def test_idle_conns_measures_idle_sessions_and_a_new_client(tmp_path):
    """perf/idle-conns end to end, small: 300 idle sessions all greeted, a
    new client's transaction meanwhile, the figures in results.md."""
    out = str(tmp_path / "idle")
    res = subprocess.run([IDLE_CONNS, "--conns", "300", "--probes", "2", "--build", BUILD,
                          "--out", out], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    run = json.load(open(os.path.join(out, "run.json")))["results"][0]
    assert run["greeted"] == 300 and run["failed"] == 0, run
    assert run["smtps_processes"] == 1
    assert 0 < run["per_conn"]["rss"] < 64 * 1024, run["per_conn"]
    assert len(run["transaction_ms"]) == 2
    assert "| 300 | 300 | 0 | 1 |" in open(os.path.join(out, "results.md")).read()


PERF = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "perf")


@pytest.mark.parametrize("tool", ["smx-source", "smtp-source"])
def test_a_timed_run_with_either_load_generator_counts_its_cpu(tmp_path, tool):
    """relay-bench's timed run (runner.Bench) straight into smx-sink, driven by
    our source or postfix's smtp-source: every message arrives, and the
    generator's and the sink's CPU per message are in the result."""
    if tool == "smtp-source" and not shutil.which("smtp-source"):
        pytest.skip("smtp-source is not installed (apt-get install postfix)")
    sys.path.insert(0, os.path.join(PERF, "lib"))
    from smxbench import runner, systems
    from smxbench.measure import disk_of
    from smxbench.sink import Sink
    sink = Sink(SINK, 0)
    try:
        direct = systems.Direct(str(tmp_path), sink.port)
        direct.setup(0)
        bench = runner.Bench(BUILD, sink, disk_of(str(tmp_path)), str(tmp_path), tool)
        res = bench.run(direct, {"size": "1K", "sessions": 5, "rcpts": 2, "msgs": 200})
    finally:
        sink.close()
    assert res["complete"] and res["errors"] == {}, res
    assert res["acked"] == 200 and res["sink"]["rcpts"] >= 400, res
    assert res["source"]["tool"] == tool
    # The generator's CPU comes from getrusage of the reaped child, to the
    # microsecond: it spent some. The sink's is read from /proc/PID/stat in
    # clock ticks (10 ms), and 200 messages cost it about 15 ms: a reading
    # of 0 or 1 tick, so only its unit can be checked here.
    assert res["source_cpu_s_per_1000"] > 0, res
    ticks = res["sink_cpu_s_per_1000"] * 200 / 1000 * os.sysconf("SC_CLK_TCK")
    assert ticks >= 0 and abs(ticks - round(ticks)) < 1e-6, res


@pytest.mark.parametrize("args, says", [
    (["--source", "smtp-source", "--sizes", "1K,2K:4K"], "smtp-source takes one message size, not '2K:4K'"),
    (["--source", "smtp-source", "--tls"], "smtp-source has no STARTTLS"),
    (["--smx-env", "tc=1"], "--smx-env wants NAME:VAR=VALUE"),
    (["--smx-set", "t2:threads=2"], "--smx-set wants NAME:SECTION.KEY=VALUE"),
])
def test_relay_bench_refuses_bad_options_before_it_starts(tmp_path, args, says):
    out = str(tmp_path / "results")
    res = subprocess.run([os.path.join(PERF, "relay-bench"), "--quick", "--out", out] + args,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode != 0 and says in res.stderr, res.stderr[-2000:]
    assert not os.path.exists(out)  # refused before anything was made


def test_relay_bench_interleaves_session_counts_and_pairs_them_by_round(tmp_path):
    """Each round runs every configuration in turn (the machine's drift then
    hits 4 and 8 sessions alike), and results.md and run.json give each
    round's 8 ÷ 4 sessions ratio, median and spread, from the raw runs."""
    out = str(tmp_path / "results")
    res = subprocess.run([os.path.join(PERF, "relay-bench"), "--quick", "--build", BUILD, "--systems", "direct",
                          "--sessions", "4,8", "--reps", "3", "--scale", "0.05", "--no-crosscheck", "--out", out],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    order = re.findall(r"\[\d+/6\] 1K-s(\d+)-r1 direct rep (\d+):", res.stdout + res.stderr)
    assert order == [("4", "1"), ("8", "1"), ("4", "2"), ("8", "2"), ("4", "3"), ("8", "3")], order
    ratios = []
    for rep in range(3):
        runs = {}
        for n in (4, 8):
            with open(os.path.join(out, "raw", "1K-s%d-r1-direct-rep%d.json" % (n, rep))) as f:
                runs[n] = json.load(f)["delivered_msgs_per_s"]
        ratios.append(runs[8] / runs[4])
    with open(os.path.join(out, "run.json")) as f:
        rows = json.load(f)["scaling"]
    assert len(rows) == 1, rows
    row = rows[0]
    assert (row["system"], row["base"], row["sessions"], row["pairs"]) == ("direct", 4, 8, 3), row
    assert row["ratio"] == pytest.approx(sorted(ratios)[1]), (row, ratios)
    assert (row["min"], row["max"]) == (pytest.approx(min(ratios)), pytest.approx(max(ratios))), (row, ratios)
    with open(os.path.join(out, "results.md")) as f:
        md = f.read()
    assert "| 1K, 1 rcpt | direct | 8 ÷ 4 | %.2f [%.2f–%.2f] | 3 |" % (row["ratio"], row["min"], row["max"]) in md


def test_profile_refuses_a_size_mix_for_smtp_source():
    res = subprocess.run([os.path.join(PERF, "profile"), "--source", "smtp-source", "-S", "1K:4K"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode != 0 and "smtp-source takes one message size" in res.stderr, res.stderr[-2000:]


def probes():
    return subprocess.run(["perf", "probe", "-l"], capture_output=True, text=True).stdout


def sanitized_build():
    out = subprocess.run(["ldd", os.path.join(BUILD, "smtps", "smx-smtps")], capture_output=True, text=True).stdout
    return "libasan" in out


def run_profile(tmp_path):
    res = subprocess.run([os.path.join(PERF, "profile"), "--build", BUILD, "-n", "300", "-s", "10", "--reps", "1",
                          "--no-perf", "--no-strace", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    with open(os.path.join(tmp_path, "raw", "profile.json")) as f:
        return json.load(f)["mallocs_per_msg"], res.stderr


def test_profile_counts_malloc_calls_per_message(tmp_path):
    """perf/profile's malloc-count pass: a uprobe on libc's malloc counted per
    process while messages go through smx. Each of smx's three working
    processes allocates for every message, so a count near zero means the
    probe or the division is broken; the probe is removed again after. A
    sanitized build has ASan's malloc, not libc's: the pass says so and
    counts nothing rather than zeros."""
    if os.geteuid() != 0 or not shutil.which("perf"):
        pytest.skip("perf probe needs root and perf (apt-get install linux-perf)")
    had_probe = "probe_libc:malloc" in probes()
    counts, log = run_profile(tmp_path)
    if sanitized_build():
        assert counts == {} and "the build is sanitized" in log, (counts, log[-2000:])
        return
    for process in ("smx-smtps", "smx-qmgr", "smx-smtpc"):
        assert 5 < counts[process] < 2000, counts
    with open(os.path.join(tmp_path, "profile.md")) as f:
        assert "| smx-smtps | %.1f |" % counts["smx-smtps"] in f.read()
    assert ("probe_libc:malloc" in probes()) == had_probe
