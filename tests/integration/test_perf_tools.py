"""The benchmark tools' TLS (perf/relay-bench --tls): smx-sink offers
STARTTLS with --tls-cert/--tls-key, smx-source uses it with --starttls;
checked against each other and against Python's smtplib. perf/idle-conns
end to end at a small scale. relay-bench's timed run with either load
generator, and what relay-bench and perf/profile refuse. Where the tools
write (outside the checkout unless --out says otherwise), and perf/history:
a run's summary appended to the dataset, the tables made from it, the
dataset in the tree and the docs it makes."""
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

from conftest import BUILD, SANITIZED, free_port
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
    (["--policy", "--scale", "40"], "--policy's recipient table covers 100000 messages, a run sends 120000"),
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


def test_relay_bench_policy_configures_both_relays(tmp_path):
    """relay-bench --policy's smx+policy and postfix+policy, configured as the
    bench does but not run (no rbldnsd): postfix's config passes `postfix
    check` with postscreen on the port and both maps built by postmap, smx's
    has issue 28's keys; in both the client 127.0.0.1 is untrusted and every
    recipient the source sends to is in the table, and no other."""
    if not shutil.which("postconf"):
        pytest.skip("postfix is not installed (apt-get install postfix)")
    sys.path.insert(0, os.path.join(PERF, "lib"))
    from smxbench import policy, systems
    lab = policy.PolicyLab(str(tmp_path), entries=1000)
    dns_port = free_port()
    lab.listen(dns_port, "127.0.0.153")

    pf = systems.Postfix(str(tmp_path), free_port(), label="postfix+policy", policy=lab)
    port = free_port()
    pf.setup(port)  # raises if postmap or `postfix check` fails
    etc = os.path.join(pf.dir, "etc")

    def postconf(*args):
        return subprocess.run(["postconf", "-c", etc] + list(args), capture_output=True, text=True,
                              check=True).stdout.strip()
    assert postconf("-h", "mynetworks") == "192.0.2.0/24"
    assert postconf("-h", "relay_domains") == "sink.example"
    assert postconf("-h", "relay_recipient_maps") == "hash:%s/relay_recipients" % etc
    assert postconf("-h", "smtpd_client_event_limit_exceptions") == ""
    assert postconf("-h", "postscreen_dnsbl_sites") == "bl.perf.example*1"
    assert postconf("-M", "127.0.0.1:%d/inet" % port).split()[-1] == "postscreen"
    assert postconf("-M", "smtpd/pass").split()[-1] == "smtpd"
    with open(os.path.join(etc, "resolv.conf")) as f:
        assert f.read() == "nameserver 127.0.0.153\n"
    assert pf.table_build["tool"] == "postmap" and pf.table_build["seconds"] > 0

    def lookup(table, key):
        return subprocess.run(["postmap", "-c", etc, "-q", key, "hash:" + os.path.join(etc, table)],
                              capture_output=True, text=True).stdout.strip()
    assert [lookup("relay_recipients", k) for k in ("u0.0@sink.example", "u99.9@sink.example",
                                                    "U5.3@SINK.example", "rcpt@sink.example")] == ["OK"] * 4
    assert lookup("relay_recipients", "u100.0@sink.example") == ""
    assert lookup("client_access", "10.2.99") == "REJECT" and lookup("client_access", "127.0.0") == ""

    smx = systems.Smx(str(tmp_path), 2525, BUILD, label="smx+policy", policy=lab)
    import tomllib
    cfg = tomllib.loads(smx.config(free_port()))
    assert cfg["server"]["relay_networks"] == ["192.0.2.0/24"]
    assert cfg["server"]["relay_domains"] == ["sink.example"]
    assert cfg["policy"]["relay_recipient_maps"] == ["hash:%s/relay_recipients" % smx.dir]
    assert cfg["policy"]["client_access"] == ["hash:%s/client_access" % smx.dir]
    assert cfg["anvil"]["exceptions"] == [] and cfg["anvil"]["recipient_rate_limit"] == policy.RATE
    assert cfg["dnsbl"]["sites"] == ["bl.perf.example*1"]
    assert cfg["client"]["dns_servers"] == ["127.0.0.1:%d" % dns_port]
    assert cfg["routes"]["default"] == "[127.0.0.1]:2525"


def test_relay_bench_milter_systems_sign_with_their_own_opendkim(open_dir, sink):
    """relay-bench --milter's postfix+dkim, set up and started as the bench
    does, relaying to a recording sink: a message from the source's sender
    domain arrives with an OpenDKIM signature that verifies, and the
    milter's CPU is counted apart from postfix's. smx+nullmilter names its
    milter in [milter] smtpd_milters, or, in a build without milters,
    refuses to set up with the reason the results give."""
    if not shutil.which("postconf") or not shutil.which("opendkim") or os.geteuid() != 0:
        pytest.skip("needs postfix and opendkim (scripts/test installs them) and root")
    sys.path.insert(0, os.path.join(PERF, "lib"))
    from smxbench import milter, systems
    from filters import listening
    from milter_checks import delivered, header, message

    # postfix's daemons drop to its account: its directory in one they may enter.
    pf = systems.Postfix(open_dir, sink.port, label="postfix+dkim",
                         milter=milter.Milter("dkim", BUILD, free_port()))
    port = free_port()
    pf.setup(port)
    try:
        pf.start()
        with smtplib.SMTP("127.0.0.1", port, timeout=60) as c:
            c.sendmail("sender@source.example", ["rcpt@sink.example"],
                       message("bench", "Hello.\n", sender="sender@source.example"))
        data = delivered(sink)[0]
        assert "d=source.example" in header(data, "DKIM-Signature") and pf.milter.filter.verify(data)
        assert pf.milter.group.cpu_seconds() > 0
    finally:
        pf.stop()
    assert not listening(pf.milter.port)
    # --cpus runs pinned copies at the same time: each has a filter of its own.
    assert systems.pinned(pf, "0").milter.socket != pf.milter.socket

    smx = systems.Smx(open_dir, sink.port, BUILD, label="smx+nullmilter",
                      milter=milter.Milter("nullmilter", BUILD, free_port()))
    if milter.smx_knows_milters(smx.binary):
        import tomllib
        assert tomllib.loads(smx.config(free_port()))["milter"]["smtpd_milters"] == [smx.milter.socket]
    else:
        with pytest.raises(RuntimeError, match="smx build has no milter support"):
            smx.setup(free_port())


def drive(milter, *args):
    res = subprocess.run([os.path.join(BUILD, "perf", "smx-milter-drive"), "--milter", milter.socket,
                          "--timeout", "10"] + list(args), capture_output=True, text=True, timeout=90)
    return res.returncode, json.loads(res.stdout.strip().splitlines()[-1])


def test_milter_drive_checks_every_end_of_message():
    """perf/smx-milter-drive against perf's null milter adding a header: every
    message ends with the edit it expects, one milter connection per message
    or several messages on one; expecting a header the milter does not add,
    every message fails and so does the run."""
    from filters import NULL_MILTER, NullMilter
    if not os.access(NULL_MILTER, os.X_OK):
        pytest.skip("%s is not built (libmilter-dev was missing at meson setup)" % NULL_MILTER)
    with NullMilter(header="X-Drive: yes") as m:
        rc, rep = drive(m, "-n", "20", "-s", "4", "--expect-header", "x-drive")
        assert rc == 0 and (rep["msgs"], rep["failed"], rep["connections"]) == (20, 0, 20)
        assert rep["errors"] == {} and rep["msgs_per_s"] > 0 and rep["cpu_ms_per_msg"] > 0
        rc, rep = drive(m, "-n", "20", "-s", "2", "-m", "5")
        assert rc == 0 and (rep["msgs"], rep["connections"]) == (20, 4)
        rc, rep = drive(m, "-n", "20", "-s", "4", "--expect-header", "DKIM-Signature")
        assert rc == 1 and rep["msgs"] == 0 and rep["errors"] == {"eom_without_DKIM-Signature": 20}


def test_relay_bench_milter_ceiling_drives_opendkim_alone():
    """relay-bench --milter's "dkim alone (driver)": OpenDKIM started as the
    bench's relays have it signs every message the driver sends; its CPU is
    counted apart from the driver's."""
    if not shutil.which("opendkim") or os.geteuid() != 0:
        pytest.skip("needs opendkim (scripts/test installs it) and root")
    sys.path.insert(0, os.path.join(PERF, "lib"))
    from smxbench import milter_ceiling
    c = milter_ceiling.Ceiling("dkim", BUILD)
    assert c.skip_reason() is None
    c.start()
    try:
        res = c.run({"size": "1K", "sessions": 5, "rcpts": 1}, 20)
    finally:
        c.stop()
    assert res["complete"], res["driver"]
    assert res["driver"]["msgs"] == 20 and res["milter_cpu_ms_per_msg"] > 0 and res["tag"] == "1K-s5-r1"


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


def test_profile_with_the_null_milter_finds_the_milter_client_on_the_stacks(tmp_path):
    """perf/profile --milter null: smx with perf/null-milter.c as its smtpd
    milter; the milter's CPU per message beside smx's, and the part of
    smx-smtps's samples with smx::milter:: code on their (DWARF) call stacks:
    every message makes about 15 round trips to the milter from that code,
    so a share of none means the stacks or their reading are broken. perf
    history keeps such a run apart from one without a milter."""
    if os.geteuid() != 0 or not shutil.which("perf"):
        pytest.skip("perf record needs root and perf (apt-get install linux-perf)")
    if SANITIZED:
        pytest.skip("unwinding a sanitized build's DWARF stacks takes perf minutes and profiles ASan, "
                    "not smx: the normal build's run covers it")
    if not os.access(os.path.join(BUILD, "perf", "smx-null-milter"), os.X_OK):
        pytest.skip("perf/smx-null-milter is not built (libmilter-dev missing at meson setup)")
    res = subprocess.run([os.path.join(PERF, "profile"), "--build", BUILD, "-n", "300", "-s", "10", "--reps", "1",
                          "--milter", "null", "--no-strace", "--no-allocs", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    with open(os.path.join(tmp_path, "raw", "profile.json")) as f:
        j = json.load(f)
    assert j["milter"] == "null"
    assert j["timed"][0]["result"]["milter_cpu_s_per_1000"] > 0, j["timed"]
    share = j["perf_top"]["smx-smtps"]["milter"]
    assert 0.01 < share["share"] <= 1 and 0 <= share["kernel_share"] <= share["share"], share
    with open(os.path.join(tmp_path, "profile.md")) as f:
        md = f.read()
    assert "## The milter client in smx-smtps" in md and "| the milter (null)" in md, md[:3000]
    dataset = tmp_path / "history.jsonl"
    res = history("--dataset", str(dataset), "add", str(tmp_path))
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in dataset.read_text().splitlines()]
    assert {r["config"] for r in rows} == {"1K-s10-milter-null"}, rows
    assert all("--milter null" in r["command"] for r in rows), rows
    smtps = next(r for r in rows if r["system"] == "smx-smtps")
    assert 0 < smtps["milter_code_user_ms_per_msg"] <= smtps["milter_code_ms_per_msg"] <= smtps["cpu_ms_per_msg"]
    assert next(r for r in rows if r["system"] == "milter")["cpu_ms_per_msg"] > 0


HISTORY = os.path.join(PERF, "history")
ROOT = os.path.dirname(PERF)
TOOLS = ("relay-bench", "commit-sweep", "profile", "crash-run", "qmgr-restart", "idle-conns", "content-store")


def quick_bench(env, *args):
    """relay-bench on direct alone, 4 and 8 sessions, a few hundred messages."""
    res = subprocess.run([os.path.join(PERF, "relay-bench"), "--quick", "--build", BUILD, "--systems", "direct",
                          "--sessions", "4,8", "--scale", "0.05", "--no-crosscheck"] + list(args),
                         env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return res


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory):
    """A relay-bench run given no --out, no $SMX_PERF_RESULTS and no
    $XDG_CACHE_HOME, HOME a new directory: (the one directory it made, its
    run.json, its stderr)."""
    home = tmp_path_factory.mktemp("home")
    env = {k: v for k, v in os.environ.items() if k not in ("SMX_PERF_RESULTS", "XDG_CACHE_HOME")}
    res = quick_bench(dict(env, HOME=str(home)), "--reps", "2")
    cache = home / ".cache" / "smx-perf"
    made = os.listdir(cache)
    assert len(made) == 1 and re.fullmatch(r"\d{4}-\d\d-\d\d-\d{4}-quick", made[0]), made
    out = str(cache / made[0])
    with open(os.path.join(out, "run.json")) as f:
        return out, json.load(f), res.stderr


def test_relay_bench_writes_its_results_outside_the_checkout_by_default(bench_run):
    out, run, log = bench_run
    assert "results in %s" % out in log
    assert os.path.isfile(os.path.join(out, "results.md"))
    assert os.path.isfile(os.path.join(out, "raw", "1K-s8-r1-direct-rep1.json"))
    assert not os.path.exists(os.path.join(PERF, "results", os.path.basename(out)))
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=7", "HEAD"], capture_output=True, text=True)
    if head.returncode:
        pytest.skip("the checkout is not a git repository: no commit to record")
    assert run["commit"] in (head.stdout.strip(), head.stdout.strip() + "-dirty"), run
    assert run["command"].startswith("perf/relay-bench --quick --build "), run


def test_relay_bench_out_takes_any_directory(tmp_path):
    out, elsewhere = tmp_path / "mine", tmp_path / "default-root"
    quick_bench(dict(os.environ, SMX_PERF_RESULTS=str(elsewhere)), "--reps", "1", "--out", str(out))
    assert os.path.isfile(out / "run.json") and os.path.isfile(out / "results.md")
    assert not os.path.exists(elsewhere)


def test_the_perf_tools_say_where_their_results_go():
    for tool in TOOLS:
        res = subprocess.run([os.path.join(PERF, tool), "--help"], capture_output=True, text=True, timeout=60)
        text = " ".join(res.stdout.split())
        assert res.returncode == 0 and "$SMX_PERF_RESULTS" in text and "~/.cache/smx-perf" in text, (tool, text)
        assert "perf/results" not in text, tool


def history(*args):
    return subprocess.run([HISTORY] + list(args), capture_output=True, text=True, timeout=120)


def test_history_add_appends_one_summary_per_configuration(bench_run, tmp_path):
    out, run, _ = bench_run
    dataset = tmp_path / "history.jsonl"
    earlier = '{"bench":"relay-bench","run":"earlier","date":"2026-01-01 00:00","commit":"0000000"}\n'
    dataset.write_text(earlier)
    res = history("--dataset", str(dataset), "add", out)
    assert res.returncode == 0, res.stderr
    lines = dataset.read_text().splitlines()
    assert lines[0] == earlier.strip()
    rows = [json.loads(line) for line in lines[1:]]
    assert sorted(r["config"] for r in rows) == ["1K-s4-r1", "1K-s8-r1"], rows
    for r in rows:
        summary = run["summary"][r["config"]]["direct"]
        assert (r["bench"], r["run"], r["system"]) == ("relay-bench", os.path.basename(out), "direct")
        assert (r["commit"], r["command"], r["raw"]) == (run["commit"], run["command"], out)
        assert r["runs"] == 2 and r["msgs"] == summary["msgs"]
        assert r["msgs_per_s"] == pytest.approx(summary["delivered"], rel=1e-3)
        assert r["msgs_per_s_min"] == pytest.approx(summary["min"], rel=1e-3)
    paired = next(r for r in rows if r["config"] == "1K-s8-r1")["paired"]
    assert (paired["base"], paired["pairs"]) == (4, 2) and paired["ratio"] == pytest.approx(
        run["scaling"][0]["ratio"], rel=1e-3)
    # Once only, and nothing but a perf tool's results: all or nothing.
    before = dataset.read_text()
    res = history("--dataset", str(dataset), "add", out)
    assert res.returncode != 0 and "already in" in res.stderr, res.stderr
    res = history("--dataset", str(dataset), "add", str(tmp_path))
    assert res.returncode != 0 and "not the results of a perf tool" in res.stderr, res.stderr
    assert dataset.read_text() == before


def test_history_report_renders_the_table_from_the_dataset(bench_run, tmp_path):
    out, run, _ = bench_run
    dataset, docs = tmp_path / "history.jsonl", tmp_path / "bench.md"
    assert history("--dataset", str(dataset), "add", out).returncode == 0
    docs.write_text("# runs\n\n<!-- perf/history relay systems=direct configs=1K-s4-r1,1K-s8-r1 -->\n"
                    "stale\n<!-- end perf/history -->\nafter\n")
    res = history("--dataset", str(dataset), "report", "--docs", str(docs), "--plots", str(tmp_path / "plots"))
    assert res.returncode == 0, res.stderr
    text = docs.read_text()
    assert "stale" not in text and text.startswith("# runs\n") and text.endswith("<!-- end perf/history -->\nafter\n")
    for line in dataset.read_text().splitlines():
        r = json.loads(line)
        assert "| smx-source | %s | %.0f [%.0f–%.0f] |" % (r["config"], r["msgs_per_s"], r["msgs_per_s_min"],
                                                         r["msgs_per_s_max"]) in text, text
    assert "Run `%s`" % os.path.basename(out) in text and "`%s`" % run["command"] in text
    assert history("--dataset", str(dataset), "report", "--docs", str(docs), "--check").returncode == 0
    docs.write_text(text.replace("| smx-source | 1K-s4-r1 |", "| smx-source | 1K-s4-r1 | 1 |"))
    res = history("--dataset", str(dataset), "report", "--docs", str(docs), "--check")
    assert res.returncode == 1 and "not what" in res.stderr


def test_history_report_draws_the_history_outside_the_tree(tmp_path):
    if subprocess.run(["/usr/bin/python3", "-c", "import matplotlib"]).returncode:
        pytest.skip("python3-matplotlib is not installed: perf/history draws no plots")
    docs = tmp_path / "bench.md"
    docs.write_text("no tables\n")
    res = history("report", "--docs", str(docs), "--plots", str(tmp_path / "plots"))
    assert res.returncode == 0, res.stderr
    pngs = sorted(os.listdir(tmp_path / "plots"))
    assert pngs == ["relay-cost.png", "relay-msgs-per-s.png", "relay-ratios.png"], pngs
    for png in pngs:
        with open(tmp_path / "plots" / png, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_the_dataset_in_the_tree_is_small_and_makes_the_tables_of_the_docs():
    path = os.path.join(PERF, "history.jsonl")
    assert os.path.getsize(path) < 1 << 20
    with open(path) as f:
        rows = [json.loads(line) for line in f]
    assert rows and all({"bench", "run", "date", "commit", "config", "system"} <= set(r) for r in rows)
    res = history("report", "--check")
    assert res.returncode == 0, res.stderr


def test_no_raw_results_are_tracked():
    res = subprocess.run(["git", "-C", ROOT, "ls-files", "--", "perf"], capture_output=True, text=True)
    if res.returncode:
        pytest.skip("the checkout is not a git repository")
    assert res.stdout and not [f for f in res.stdout.splitlines() if f.startswith("perf/results/")]
