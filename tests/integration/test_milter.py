"""Milters in SMTPS (docs/milter.md) against a real smx run, a sink and the
scripted milter of milter_peer.py: every stage and its macros, every reply,
every end-of-message edit checked at the sink, a quarantine in `smx queue`,
the default actions of a milter that stalls, crashes or breaks the
protocol, two milters in a chain, pipelining, BDAT, a large message.

The relay takes mail from 127.0.0.1 (relay_networks) for any domain; the
milters' timeouts are short so that each failure costs about a second."""
import os
import re
import signal
import urllib.request

import pytest

from conftest import Raw, free_port, wait_until
from milter_peer import MilterPeer

SHORT = 'connect_timeout = "2s"\ncommand_timeout = "1s"\ncontent_timeout = "1s"\n'


def milter_config(*specs, extra=""):
    items = ", ".join(s if s.startswith("{") else '"%s"' % s for s in specs)
    return "[milter]\nsmtpd_milters = [%s]\n%s%s" % (items, SHORT, extra)


def with_default(spec, action):
    """The config of one milter with its own default action."""
    return milter_config('{ socket = "%s", default_action = "%s" }' % (spec, action))


@pytest.fixture
def peers():
    made = []

    def make(**kw):
        p = MilterPeer(**kw)
        made.append(p)
        return p
    yield make
    for p in made:
        p.stop()


def session(port, rcpts=("r@example.net",), body=b"Subject: hi\r\n\r\nbody\r\n",
            sender="s@example.org"):
    """EHLO, MAIL, RCPTs, DATA: each reply, keyed by stage (or recipient)."""
    c = Raw(port)
    out = {"greeting": c.greeting, "ehlo": c.cmd("EHLO client.test").splitlines()[-1],
           "mail": c.cmd("MAIL FROM:<%s>" % sender)}
    for r in rcpts:
        out[r] = c.cmd("RCPT TO:<%s>" % r)
    if any(out[r].startswith("250") for r in rcpts):
        out["data"] = c.cmd("DATA")
        if out["data"].startswith("354"):
            c.send(body + b".\r\n")
            out["eom"] = c.reply()
    out["quit"] = c.cmd("QUIT")
    c.close()
    return out


def stats_listen():
    """A [stats] listener for the config, and its port."""
    port = free_port()
    return '[stats]\nlisten = "127.0.0.1:%d"\n' % port, port


def milter_failures(port):
    """smx_milter_failures_total by action, from the Prometheus endpoint."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        text = r.read().decode()
    return {a: int(n) for a, n in
            re.findall(r'^smx_milter_failures_total\{action="(\w+)"\} (\d+)$', text, re.M)}


def delivered(sink, n=1):
    wait_until(lambda: sink.count() >= n, 20, "%d message(s) at the sink" % n)
    return sorted(sink.messages(), key=lambda m: m["name"])


def test_every_stage_is_reported_with_postfix_macros(sink, make_relay, peers):
    m = peers()
    relay = make_relay(sink.port, milter_config(m.socket_spec))
    r = session(relay.port, body=b"Subject: hi\r\nX-Folded: a\r\n\tb\r\n\r\nthe body\r\n")
    assert r["eom"].startswith("250 2.0.0 Ok: queued as "), r
    qid = r["eom"].rsplit(" ", 1)[1]
    delivered(sink)
    wait_until(lambda: "quit" in m.stages(), 10, "QUIT at the milter")
    s = m.sessions[-1]  # the first is the start-up probe's
    # v6, every action, every v6 step but seeing rejected recipients.
    assert s.optneg == (6, 0x1ff, 0x1ff7ff), s.optneg
    assert s.stages[:5] == ["connect", "helo", "mail", "rcpt", "data"], s.stages
    assert s.stages[-2:] == ["eom", "quit"], s.stages
    # Our Received: first, then the client's fields; folds joined by LF,
    # the space after the colon eaten (sendmail's form).
    names = [h[0] for h in s.headers]
    assert names == ["Received", "Subject", "X-Folded"], s.headers
    assert s.headers[1] == ("Subject", "hi")
    assert s.headers[2] == ("X-Folded", "a\n\tb")
    assert s.body == b"the body\r\n"
    assert s.macros["C"]["j"] == "smx.test"
    assert s.macros["C"]["{client_addr}"] == "127.0.0.1"
    assert s.macros["C"]["{daemon_addr}"] == "127.0.0.1"
    assert s.macros["M"]["{mail_addr}"] == "s@example.org"
    assert s.macros["M"]["{mail_host}"] == "example.org"
    assert s.macros["M"]["i"] == qid
    assert s.macros["R"]["{rcpt_addr}"] == "r@example.net"
    assert s.macros["R"]["{rcpt_host}"] == "example.net"
    assert s.macros["E"]["i"] == qid
    connect = s.data[0][1]
    assert connect.split(b"\0")[0] in (b"[127.0.0.1]", b"localhost")
    assert connect.split(b"\0")[1][:1] == b"4"


@pytest.mark.parametrize("stage", ["connect", "helo", "mail", "rcpt", "data", "eom"])
def test_reject_at_each_stage(sink, make_relay, peers, stage):
    m = peers(script={stage: "reject"})
    relay = make_relay(sink.port, milter_config(m.socket_spec))
    r = session(relay.port)
    key = {"connect": "ehlo", "helo": "ehlo", "mail": "mail", "rcpt": "r@example.net",
           "data": "data", "eom": "eom"}[stage]
    assert r[key] == "550 5.7.1 Command rejected", r
    if stage == "connect":  # every command but QUIT gets it
        assert r["mail"] == "550 5.7.1 Command rejected"
        assert r["quit"].startswith("221")
    relay.log_matching(r"milter-reject: \S+ from \S+: 550 5\.7\.1 Command rejected")
    # SMTPS reports its counts each second.
    wait_until(lambda: relay.stats().get("rejected_5xx_milter", 0) >= 1, 10, "the count")
    assert sink.count() == 0


def test_tempfail_and_reply_codes_with_several_lines(sink, make_relay, peers):
    m = peers(script={"rcpt": lambda d: "tempfail" if b"temp@" in d else
                      "reply 550-5.7.1 first line\\n550 5.7.1 second line" if b"bad@" in d
                      else "continue",
                      "eom": "reply 451 4.7.0 try later"})
    relay = make_relay(sink.port, milter_config(m.socket_spec))
    r = session(relay.port, rcpts=("temp@example.net", "bad@example.net", "ok@example.net"))
    assert r["temp@example.net"] == "451 4.7.1 Service unavailable - try again later"
    assert r["bad@example.net"] == "550-5.7.1 first line\n550 5.7.1 second line"
    assert r["ok@example.net"].startswith("250")
    assert r["eom"] == "451 4.7.0 try later"
    relay.log_matching(r"milter-reject: RCPT from \S+: 550-5\.7\.1 first line 550 5\.7\.1 "
                       r"second line; from=<s@example\.org> to=<bad@example\.net>")
    assert sink.count() == 0


def test_a_reply_code_that_is_not_4xx_or_5xx_is_a_protocol_error(sink, make_relay, peers):
    m = peers(script={"mail": "reply 250 2.0.0 fine"})
    relay = make_relay(sink.port, with_default(m.socket_spec, "accept"))
    r = session(relay.port)
    assert r["mail"].startswith("250 2.1.0"), r
    assert r["eom"].startswith("250 2.0.0 Ok: queued")
    relay.log_matching(r"milter %s: SMFIR_REPLYCODE: code 250 is not 4XX or 5XX" % m.socket_spec)
    delivered(sink)


def test_accept_ends_the_milter_for_the_message(sink, make_relay, peers):
    m = peers(script={"mail": "accept"})
    relay = make_relay(sink.port, milter_config(m.socket_spec))
    r = session(relay.port)
    assert r["eom"].startswith("250 2.0.0 Ok: queued"), r
    delivered(sink)
    wait_until(lambda: "quit" in m.stages(), 10, "QUIT at the milter")
    assert m.stages() == ["connect", "helo", "mail", "quit"]


def test_discard_at_rcpt_answers_250_and_delivers_nothing(sink, make_relay, peers):
    m = peers(script={"rcpt": "discard"})
    relay = make_relay(sink.port, milter_config(m.socket_spec))
    r = session(relay.port)
    assert r["r@example.net"].startswith("250")
    qid = r["eom"].rsplit(" ", 1)[1]
    assert r["eom"].startswith("250 2.0.0 Ok: queued as "), r
    relay.log_matching(r"%s: milter-discard: END-OF-MESSAGE from \S+: milter triggers DISCARD "
                       r"action; from=<s@example\.org>" % qid)
    # A later message goes through: nothing of the discarded one arrives.
    m.script = {}
    assert session(relay.port)["eom"].startswith("250")
    [msg] = delivered(sink)
    assert msg["rcpts"] == ["r@example.net"]
    assert sink.count() == 1


def test_quarantine_holds_the_message_and_smx_queue_says_why(sink, make_relay, peers):
    m = peers(script={"eom": ["quarantine spam score 99", "continue"]})
    relay = make_relay(sink.port, milter_config(m.socket_spec))
    r = session(relay.port)
    qid = r["eom"].rsplit(" ", 1)[1]
    wait_until(lambda: "spam score 99" in relay.smx("queue").stdout, 20, "the held message")
    q = relay.smx("queue").stdout
    assert qid in q and "(held," in q, q
    relay.log_matching(r"%s: milter-hold: END-OF-MESSAGE from \S+: spam score 99" % qid)
    assert sink.count() == 0


def test_every_edit_reaches_the_sink(sink, make_relay, peers):
    m = peers(script={"eom": [
        "addheader X-Added yes",
        "insheader 0 X-First at the top",
        "chgheader 1 Subject changed",
        "chgheader 1 X-Remove",
        "addrcpt <added@example.net>",
        "addrcpt_par <par@example.net> NOTIFY=NEVER",
        "delrcpt <gone@example.net>",
        "chgfrom <new@example.org> BODY=8BITMIME",
        "progress",
        "replbody new body\\nsecond line\\n",
        "continue"]})
    relay = make_relay(sink.port, milter_config(m.socket_spec))
    r = session(relay.port, rcpts=("r@example.net", "gone@example.net"),
                body=b"Subject: old\r\nX-Remove: me\r\nTo: r@example.net\r\n\r\nold body\r\n")
    assert r["eom"].startswith("250 2.0.0 Ok: queued"), r
    msgs = delivered(sink)
    assert len(msgs) == 1
    msg = msgs[0]
    assert msg["from"] == "new@example.org"
    assert sorted(msg["rcpts"]) == ["added@example.net", "par@example.net", "r@example.net"]
    assert "BODY=8BITMIME" in msg["params"].upper()
    head, body = msg["data"].split(b"\r\n\r\n", 1)
    fields = head.split(b"\r\n")
    assert fields[0] == b"X-First: at the top", fields
    assert fields[1].startswith(b"Received: ")
    assert b"Subject: changed" in fields
    assert not any(f.startswith(b"X-Remove") for f in fields)
    assert fields[-1] == b"X-Added: yes"
    assert body == b"new body\r\nsecond line\r\n"


def test_added_recipients_and_a_new_sender_are_rewritten_as_the_clients(sink, make_relay, peers):
    # As postfix's cleanup: a milter's ADDRCPT goes through canonical maps
    # and virtual alias expansion, its CHGFROM through the sender's maps.
    m = peers(script={"eom": ["addrcpt <team@example.net>", "chgfrom <s@internal.example>",
                              "continue"]})
    relay = make_relay(sink.port, milter_config(m.socket_spec) + """
[rewrite]
virtual_alias_maps = ["inline:{ {team@example.net = alice@example.net, r@example.net} }"]
sender_canonical_maps = ["inline:{ @internal.example = @public.example }"]
""")
    r = session(relay.port)
    assert r["eom"].startswith("250 2.0.0 Ok: queued"), r
    [msg] = delivered(sink)
    assert msg["from"] == "s@public.example"
    # r@ was a recipient already: one copy.
    assert sorted(msg["rcpts"]) == ["alice@example.net", "r@example.net"]


def test_a_large_message_with_edits(sink, make_relay, peers):
    # Past spill_size (256 KiB): the content is a file, read back and
    # rewritten; a small one goes to a segment (the test above).
    m = peers(script={"eom": ["addheader X-Big checked", "continue"]})
    relay = make_relay(sink.port, milter_config(m.socket_spec))
    line = b"x" * 998 + b"\r\n"
    body = b"Subject: big\r\n\r\n" + line * 1200
    r = session(relay.port, body=body)
    assert r["eom"].startswith("250"), r
    [msg] = delivered(sink)
    assert msg["data"].endswith(line * 1200)
    assert b"\r\nX-Big: checked\r\n\r\n" in msg["data"]
    assert m.sessions[-1].body == line * 1200
    content = os.path.join(relay.spool, "cdb")
    if os.path.isdir(content):
        leftovers = [f for _, _, fs in os.walk(content) for f in fs if f.endswith(".tmp")]
        assert leftovers == []


def test_bdat_with_edits(sink, make_relay, peers):
    m = peers(script={"eom": ["addheader X-Bdat yes", "continue"]})
    relay = make_relay(sink.port, milter_config(m.socket_spec))
    c = Raw(relay.port)
    c.cmd("EHLO client.test")
    assert c.cmd("MAIL FROM:<s@example.org>").startswith("250")
    assert c.cmd("RCPT TO:<r@example.net>").startswith("250")
    part1 = b"Subject: chunks\r\n\r\nfirst "
    part2 = b"second\r\n"
    c.send(b"BDAT %d\r\n" % len(part1) + part1)
    assert c.reply().startswith("250")
    c.send(b"BDAT %d LAST\r\n" % len(part2) + part2)
    assert c.reply().startswith("250 2.0.0 Ok: queued"), "BDAT LAST"
    c.cmd("QUIT")
    [msg] = delivered(sink)
    assert msg["data"].endswith(b"X-Bdat: yes\r\n\r\nfirst second\r\n")


def test_pipelined_rcpts_are_answered_in_order(sink, make_relay, peers):
    m = peers(script={"rcpt": lambda d: "reject" if b"no@" in d else "continue"})
    relay = make_relay(sink.port, milter_config(m.socket_spec))
    c = Raw(relay.port)
    c.cmd("EHLO client.test")
    c.send(b"MAIL FROM:<s@example.org>\r\nRCPT TO:<a@example.net>\r\nRCPT TO:<no@example.net>\r\n"
           b"RCPT TO:<b@example.net>\r\nDATA\r\n")
    replies = [c.reply() for _ in range(5)]
    assert replies[0].startswith("250") and replies[1].startswith("250")
    assert replies[2] == "550 5.7.1 Command rejected"
    assert replies[3].startswith("250") and replies[4].startswith("354"), replies
    c.send(b"Subject: p\r\n\r\nx\r\n.\r\n")
    assert c.reply().startswith("250")
    c.cmd("QUIT")
    [msg] = delivered(sink)
    assert msg["rcpts"] == ["a@example.net", "b@example.net"]


def test_two_milters_in_a_chain(sink, make_relay, peers):
    first = peers(script={"eom": ["addheader X-One 1", "continue"]})
    second = peers(script={"rcpt": lambda d: "reject" if b"no@" in d else "continue",
                           "eom": ["addheader X-Two 2", "continue"]})
    relay = make_relay(sink.port, milter_config(first.socket_spec, second.socket_spec))
    r = session(relay.port, rcpts=("no@example.net", "r@example.net"))
    assert r["no@example.net"] == "550 5.7.1 Command rejected"
    assert r["eom"].startswith("250")
    [msg] = delivered(sink)
    assert b"X-One: 1\r\nX-Two: 2\r\n\r\n" in msg["data"]
    # The first milter saw the refused recipient too (it said continue).
    assert [d for st, d in first.sessions[-1].data if st == "rcpt"][0].startswith(b"<no@")


@pytest.mark.parametrize("failure", ["stall", "close", "garbage", "huge", "unreachable"])
@pytest.mark.parametrize("action", ["tempfail", "accept", "reject"])
def test_a_failed_milter_takes_its_default_action(sink, make_relay, peers, failure, action):
    script = {"stall": "stall 3", "close": "close", "garbage": "garbage", "huge": "huge"}
    m = peers(script={"eom": script.get(failure, "continue")})
    spec = m.socket_spec
    if failure == "unreachable":
        m.stop()
    stats, mport = stats_listen()
    relay = make_relay(sink.port, with_default(spec, action) + stats)
    r = session(relay.port)
    where = "ehlo" if failure == "unreachable" else "eom"
    expect = {"tempfail": "451 4.7.1 Service unavailable - try again later",
              "reject": "550 5.5.0 Service unavailable"}
    if action == "accept":
        assert r["eom"].startswith("250 2.0.0 Ok: queued"), r
        delivered(sink)
    else:
        assert r[where] == expect[action], r
        assert sink.count() == 0
    why = {"stall": "can't read SMFIC_BODYEOB reply packet header: Connection timed out",
           "close": "can't read SMFIC_BODYEOB reply packet header: lost connection",
           "garbage": "unexpected unknown reply 'Z' after SMFIC_BODYEOB",
           "huge": "unreasonable packet length: 2147483648 > 1048576",
           "unreachable": "connect: Connection refused"}[failure]
    relay.log_matching("warning: milter %s: %s" % (spec, why))
    # Logged once per event: for an unreachable milter once per session (the
    # start-up probes' sessions could not connect either), else once.
    def all_ended(t):
        return len(re.findall(r"\]: disconnect from ", t)) == len(re.findall(r"\]: connect from ", t))
    log = wait_until(lambda: (lambda t: t if all_ended(t) else None)(relay.log_text()), 10,
                     "every session's last line")
    sessions = len(re.findall(r"\]: connect from ", log))
    warnings = log.count("milter %s: " % spec)
    # (A probe that hangs up before its session asks the milter gets none.)
    assert 1 <= warnings <= sessions if failure == "unreachable" else warnings == 1, log
    # Each failure counted under the action that stood for it (SMTPS reports each second).
    expect_counts = {a: warnings if a == action else 0
                     for a in ("tempfail", "accept", "reject", "quarantine")}
    wait_until(lambda: milter_failures(mport) == expect_counts, 10,
               "smx_milter_failures_total %s" % expect_counts)


def test_a_huge_body_replacement_is_a_milter_failure(sink, make_relay, peers):
    m = peers(script={"eom": ["replbody_size 3000000", "continue"]})
    relay = make_relay(sink.port, "[server]\nmax_message_size = 1000000\n" + milter_config(
        '{ socket = "%s", content_timeout = "5s" }' % m.socket_spec))
    r = session(relay.port)
    assert r["eom"] == "451 4.7.1 Service unavailable - try again later", r
    relay.log_matching("milter %s: body replacement larger than 1000000 octets" % m.socket_spec)
    assert sink.count() == 0


def test_listener_milters_replace_the_list_for_that_listener(sink, make_relay, peers):
    m = peers(script={"mail": "reject"})
    relay = make_relay(sink.port, milter_config(m.socket_spec), start=False)
    with open(relay.config, "a") as f:
        f.write('listener_milters = { "127.0.0.1:%d" = [] }\n' % relay.port)
    relay.start()
    r = session(relay.port)
    assert r["eom"].startswith("250"), r
    assert m.sessions == []


def test_what_is_queued_after_edits_is_the_edited_message(sink, make_relay, peers):
    # kill -9 smx after the 250: the queue holds the edited message only.
    m = peers(script={"eom": ["addheader X-Edited yes", "continue"]})
    relay = make_relay(sink.port, milter_config(m.socket_spec))
    sink.stop()  # nothing delivers: what is queued stays
    r = session(relay.port)
    assert r["eom"].startswith("250"), r
    os.kill(relay.proc.pid, signal.SIGKILL)
    for pid in relay.child_pids("smx-qmgr") + relay.child_pids("smx-smtps"):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    found = []
    for root, _, files in os.walk(relay.spool):
        for f in files:
            with open(os.path.join(root, f), "rb") as fh:
                data = fh.read()
            if b"Subject: hi" in data:
                found.append(data)
    assert found and all(b"X-Edited: yes" in d for d in found), found


def test_bdat_asks_the_data_stage_at_the_first_chunk(sink, make_relay, peers):
    m = peers(script={"data": "reply 554 5.7.1 no chunks today"})
    relay = make_relay(sink.port, milter_config(m.socket_spec))
    c = Raw(relay.port)
    c.cmd("EHLO client.test")
    c.cmd("MAIL FROM:<s@example.org>")
    c.cmd("RCPT TO:<r@example.net>")
    part = b"Subject: x\r\n\r\nbody\r\n"
    # The chunk is read (the next command is found) and refused.
    c.send(b"BDAT %d LAST\r\n" % len(part) + part)
    assert c.reply() == "554 5.7.1 no chunks today"
    assert c.cmd("RSET").startswith("250")
    c.cmd("QUIT")
    assert "data" in m.stages()
    assert sink.count() == 0


def test_unknown_commands_reach_the_milter(sink, make_relay, peers):
    m = peers(script={"unknown": lambda d: "reply 550 5.5.1 not here" if d.startswith(b"XYZZY")
                      else "continue"})
    relay = make_relay(sink.port, milter_config(m.socket_spec))
    c = Raw(relay.port)
    c.cmd("EHLO client.test")
    assert c.cmd("XYZZY plugh") == "550 5.5.1 not here"
    assert c.cmd("FROB") == "500 5.5.2 Error: command not recognized"
    c.cmd("QUIT")
    sent = [d for st, d in m.sessions[-1].data if st == "unknown"]
    assert sent == [b"XYZZY plugh\0", b"FROB\0"]


def test_accept_at_connect_leaves_the_milter_out_for_the_session(sink, make_relay, peers):
    m = peers(script={"connect": "accept"})
    relay = make_relay(sink.port, milter_config(m.socket_spec))
    assert session(relay.port)["eom"].startswith("250")
    delivered(sink)
    wait_until(lambda: "quit" in m.stages(), 10, "QUIT at the milter")
    assert m.stages() == ["connect", "quit"]


def test_the_milter_names_its_macros_and_its_steps(sink, make_relay, peers):
    # SETSYMLIST for MAIL; no HELO; no reply to RCPT, headers or body; the
    # leading space of header values kept.
    m = peers(symlist={2: "{client_addr} {mail_addr}"},
              protocol=0x2 | 0x8000 | 0x80 | 0x80000 | 0x100000)
    relay = make_relay(sink.port, milter_config(m.socket_spec))
    r = session(relay.port, rcpts=("a@example.net", "b@example.net"))
    assert r["eom"].startswith("250"), r
    delivered(sink)
    s = m.sessions[-1]
    assert s.macros["M"] == {"{client_addr}": "127.0.0.1", "{mail_addr}": "s@example.org"}
    assert "helo" not in s.stages
    assert s.stages.count("rcpt") == 2
    assert ("Subject", " hi") in s.headers


def test_quarantine_is_a_default_action_too(sink, make_relay, peers):
    m = peers(script={"eom": "close"})
    stats, mport = stats_listen()
    relay = make_relay(sink.port, with_default(m.socket_spec, "quarantine") + stats)
    r = session(relay.port)
    assert r["eom"].startswith("250 2.0.0 Ok: queued as "), r
    qid = r["eom"].rsplit(" ", 1)[1]
    wait_until(lambda: qid in relay.smx("queue").stdout, 20, "the held message")
    assert "milter %s failed" % m.socket_spec in relay.smx("queue").stdout
    assert sink.count() == 0
    wait_until(lambda: milter_failures(mport)["quarantine"] == 1, 10, "the failure counted")


def test_a_milter_that_crashes_in_the_header(sink, make_relay, peers):
    seen = []

    def crash_on_second(_):
        seen.append(1)
        return "close" if len(seen) == 2 else "continue"
    m = peers(script={"header": crash_on_second})
    relay = make_relay(sink.port, milter_config(m.socket_spec))
    r = session(relay.port)
    assert r["eom"] == "451 4.7.1 Service unavailable - try again later", r
    relay.log_matching("warning: milter %s: can't read SMFIC_HEADER reply packet header: "
                       "lost connection" % m.socket_spec)
    assert sink.count() == 0
