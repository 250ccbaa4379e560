"""Metrics for monitoring (issue 12, item 7; issue 26, item 10): a real
Prometheus server (the Debian package) on 127.0.0.1 scrapes smx's metrics
port every second; the test sends mail and asks Prometheus's HTTP API for the
histograms, the per-destination gauges and the refusal counts, has promtool
check the exposition, then runs every PromQL expression of
contrib/grafana/smx.json against it."""
import json
import os
import re
import shutil
import signal
import smtplib
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from conftest import REPO, free_port, send, wait_until

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(not PROMETHEUS, reason="needs the prometheus package "
                                "(scripts/test installs it)")


def http_get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


@pytest.fixture
def prometheus(tmp_path):
    """Returns start(target_port) -> query function."""
    procs = []

    def start(target):
        port = free_port()
        d = tmp_path / "prometheus"
        d.mkdir()
        (d / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: smx\n    static_configs:\n"
            "      - targets: ['127.0.0.1:%d']\n" % target)
        log = open(d / "prometheus.log", "wb")
        procs.append(subprocess.Popen(
            [PROMETHEUS, "--config.file=%s" % (d / "prometheus.yml"),
             "--storage.tsdb.path=%s" % (d / "data"),
             "--web.listen-address=127.0.0.1:%d" % port, "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT))
        base = "http://127.0.0.1:%d" % port

        def ready():
            assert procs[0].poll() is None, (d / "prometheus.log").read_text()
            try:
                return "Ready" in http_get(base + "/-/ready", 2)
            except OSError:
                return False
        wait_until(ready, 60, "prometheus to be ready")

        def query(expr):
            """Prometheus's answer as a dict; raises on an HTTP error (a parse
            error is a 400 with status "error")."""
            url = base + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
            try:
                return json.loads(http_get(url))
            except urllib.error.HTTPError as e:
                return json.loads(e.read().decode())
        return query
    yield start
    for p in procs:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def values(query, expr):
    """{labels minus __name__: float value} of an instant vector query."""
    r = query(expr)
    assert r["status"] == "success", (expr, r)
    return {tuple(sorted((k, v) for k, v in s["metric"].items()
                         if k not in ("__name__", "job", "instance"))): float(s["value"][1])
            for s in r["data"]["result"]}


def scalar(query, expr):
    v = values(query, expr)
    return next(iter(v.values())) if len(v) == 1 else None


def grafana_exprs():
    with open(os.path.join(REPO, "contrib", "grafana", "smx.json")) as f:
        dash = json.load(f)
    found = []

    def walk(x):
        if isinstance(x, dict):
            for k, v in x.items():
                if k == "expr":
                    found.append(v)
                else:
                    walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
    walk(dash)
    return found


def test_prometheus_scrapes_histograms_and_gauges(make_sink, make_relay, prometheus):
    sink = make_sink("--tempfail-rcpt", "@defer\\.test$")
    slow = make_sink("--stall", "90", sub="slow")  # in flight to the end
    mport = free_port()
    relay = make_relay(sink.port, '[server]\nrelay_networks = ["127.0.0.1/32"]\n'
                                  '[stats]\nlisten = "127.0.0.1:%d"\n'
                                  '[routes]\n"slow.test" = "[127.0.0.1]:%d"' % (mport, slow.port))
    query = prometheus(mport)
    # Refused: relaying for a client outside relay_networks, and a SIZE over
    # the limit (twice).
    with smtplib.SMTP("127.0.0.1", relay.port, timeout=30, source_address=("127.0.0.2", 0)) as c:
        c.ehlo("outside.test")
        assert c.mail("s@outside.test")[0] == 250
        assert c.rcpt("x@elsewhere.test")[0] == 554
        c.rset()
        assert c.mail("s@outside.test", ["SIZE=999999999"])[0] == 552
        assert c.mail("s@outside.test", ["SIZE=999999998"])[0] == 552
    for i in range(5):
        send(relay.port, "a@client.test", ["good%d@example.net" % i], b"Subject: m\r\n\r\nx\r\n")
    send(relay.port, "a@client.test", ["x@defer.test", "y@defer.test"], b"Subject: d\r\n\r\nx\r\n")
    send(relay.port, "a@client.test", ["z@slow.test"], b"Subject: s\r\n\r\nx\r\n")
    wait_until(lambda: sink.count() == 5, 30, "five deliveries")

    # Received 7 transactions: 7 acks; 5 recipients delivered.
    wait_until(lambda: scalar(query, "smx_ack_latency_seconds_count") == 7, 30,
               "the ack latency count in prometheus")
    wait_until(lambda: scalar(query, "smx_queue_age_seconds_count") == 5, 30,
               "the queue age count in prometheus")
    # The exposition is consistent: +Inf bucket = count, buckets ascend.
    buckets = values(query, "smx_ack_latency_seconds_bucket")
    by_le = sorted((float(dict(k)["le"]), v) for k, v in buckets.items())
    assert by_le[-1] == (float("inf"), 7.0)
    assert [v for _, v in by_le] == sorted(v for _, v in by_le)
    ack_sum = scalar(query, "smx_ack_latency_seconds_sum")
    assert 0 < ack_sum < 7 * 5, ack_sum  # each ack well under 5 s on loopback
    p50 = scalar(query, "histogram_quantile(0.5, smx_ack_latency_seconds_bucket)")
    assert 0 < p50 <= 5, p50
    # Every commit is at least one transaction; at most 7 commits.
    commits = scalar(query, "smx_ibdb_batch_size_count")
    assert 1 <= commits <= 7 and scalar(query, "smx_ibdb_batch_size_sum") >= 7
    assert scalar(query, "smx_ibdb_fsync_seconds_count") == commits
    assert scalar(query, "smx_ibdb_commits_total") >= commits
    # 5 deliveries and at least the first attempt at defer.test; the stalled
    # one has no result yet.
    assert scalar(query, "smx_delivery_latency_seconds_count") >= 6
    assert 0 < scalar(query, "smx_queue_age_seconds_sum") < 5 * 30

    # Per-destination gauges: the stalled delivery is active; defer.test's
    # two recipients are deferred (the DEFEDB count is at most 30 s old).
    slow_key = (("destination", "[127.0.0.1]:%d" % slow.port),)
    active = wait_until(lambda: (lambda v: v if slow_key in v else None)(
        values(query, "smx_destination_active_recipients")), 30, "the stalled destination")
    assert active[slow_key] == 1.0, active
    deferred = wait_until(lambda: values(query, "smx_domain_deferred_recipients"), 60,
                          "a deferred domain")
    assert deferred == {(("domain", "defer.test"),): 2.0}, deferred

    # Every refusal, by class and reason (SMTPS reports them each second).
    refused = wait_until(lambda: (lambda v: v if len(v) == 2 else None)(
        values(query, "smx_rejected_total")), 30, "the refusals in prometheus")
    assert refused == {(("class", "5xx"), ("reason", "relay_denied")): 1.0,
                       (("class", "5xx"), ("reason", "message_too_big")): 2.0}, refused
    info = values(query, "smx_build_info")
    assert len(info) == 1 and dict(next(iter(info)))["version"] == "0.1.0", info
    assert re.fullmatch(r"[0-9a-f]{7,40}|unknown", dict(next(iter(info)))["commit"]), info

    # Every metric has HELP and TYPE lines.
    text = http_get("http://127.0.0.1:%d/metrics" % mport)
    names = {l.split()[0].split("{")[0] for l in text.splitlines() if not l.startswith("#")}
    for n in names:
        base = n
        for suffix in ("_bucket", "_sum", "_count"):
            if n.endswith(suffix) and "# TYPE %s histogram" % n[:-len(suffix)] in text:
                base = n[:-len(suffix)]
        assert "# HELP %s " % base in text and "# TYPE %s " % base in text, n

    # A query string is no matter; another path is not found.
    assert http_get("http://127.0.0.1:%d/metrics?x=1&name[]=smx_received_total" % mport) \
        .startswith("# HELP smx_build_info ")
    try:
        http_get("http://127.0.0.1:%d/other" % mport)
        assert False, "/other answered"
    except urllib.error.HTTPError as e:
        assert e.code == 404

    # promtool's lint: counters end in _total, base units, HELP for all.
    if PROMTOOL:
        r = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=30)
        assert (r.returncode, r.stdout + r.stderr) == (0, ""), r.stdout + r.stderr

    # The Grafana dashboard: every expression parses and returns data
    # (rate() needs two samples in its window: there are many by now), for
    # this relay picked by its instance variable, whose values come from
    # smx_build_info's instance label.
    with open(os.path.join(REPO, "contrib", "grafana", "smx.json")) as f:
        variables = json.load(f)["templating"]["list"]
    assert [(v["name"], v["definition"]) for v in variables] == \
        [("instance", "label_values(smx_build_info, instance)")]
    instance = "127.0.0.1:%d" % mport
    assert values(query, 'smx_build_info{instance="%s"}' % instance)
    exprs = grafana_exprs()
    assert len(exprs) >= 10
    for e in exprs:
        assert '{instance=~"$instance"}' in e, e
        r = query(e.replace("$instance", instance))
        assert r["status"] == "success", (e, r)
        assert r["data"]["result"], "no data for %s" % e
        # Another instance's variable shows nothing of this one.
        r = query(e.replace("$instance", "192.0.2.1:9525"))
        assert r["status"] == "success" and not r["data"]["result"], (e, r)
