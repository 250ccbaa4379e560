"""What the real filters of filters.py do through a milter host, written once
for every host: a test module subclasses MilterHostChecks with a
`milter_host` fixture, a factory that starts the host (postfix in
test_filters_postfix.py, smx in test_filters.py) with the given filters as
its smtpd milters, relaying to a new sink, and returns (port, sink)."""
import email.utils
import os
import shutil
import smtplib

import pytest

from conftest import wait_until
from filters import GTUBE, NULL_MILTER, NullMilter, OpenDkim, Rspamd, SpamassMilter, Spamd

SENDER = "alice@example.test"  # OpenDkim's signing domain
RCPT = "bob@sink.test"


def message(subject, body, sender=SENDER):
    return ("From: Alice <%s>\r\nTo: Bob <%s>\r\nSubject: %s\r\nDate: %s\r\nMessage-ID: %s\r\n"
            "MIME-Version: 1.0\r\nContent-Type: text/plain; charset=us-ascii\r\n\r\n%s\r\n"
            % (sender, RCPT, subject, email.utils.formatdate(), email.utils.make_msgid(domain="example.test"),
               body.replace("\n", "\r\n"))).encode()


def submit(port, msg, sender=SENDER):
    """Sends msg from 127.0.0.1; (code, text) of the reply to its end of data."""
    with smtplib.SMTP("127.0.0.1", port, timeout=180) as c:
        c.ehlo("client.test")
        try:
            c.sendmail(sender, [RCPT], msg)
        except smtplib.SMTPDataError as e:
            return e.smtp_code, e.smtp_error.decode(errors="replace")
    return 250, ""


def delivered(sink, n=1):
    """The data of the sink's messages once it has n."""
    wait_until(lambda: sink.count() >= n, 60, "%d message(s) at the sink" % n)
    return [m["data"] for m in sorted(sink.messages(), key=lambda m: int(m["name"].split(".")[0]))]


def header(data, name):
    """The value of the first header field `name` of data, unfolded, or None."""
    head = data.split(b"\r\n\r\n", 1)[0].decode(errors="replace")
    for field in head.replace("\r\n ", " ").replace("\r\n\t", " ").split("\r\n"):
        key, _, value = field.partition(":")
        if key.strip().lower() == name.lower():
            return value.strip()
    return None


def needs(*programs):
    missing = [p for p in programs if not shutil.which(p)]
    if missing:
        pytest.skip("needs %s (Debian packages: see scripts/test)" % ", ".join(missing))
    if os.geteuid() != 0:
        pytest.skip("needs root (the filters drop to their own accounts)")


class MilterHostChecks:
    # One OpenDKIM per test class too: it keeps nothing between messages,
    # and stopping libmilter's listener takes it about 5 s.
    @pytest.fixture(scope="class")
    def opendkim(self):
        needs("opendkim", "opendkim-genkey")
        with OpenDkim() as f:
            yield f

    # Loading rspamd's or SpamAssassin's rules takes seconds: one of each
    # per test class.
    @pytest.fixture(scope="class")
    def rspamd(self):
        needs("rspamd")
        with Rspamd() as f:
            yield f

    @pytest.fixture(scope="class")
    def spamd(self):
        needs("spamd", "spamass-milter")
        with Spamd() as f:
            yield f

    @pytest.fixture
    def null_milter(self):
        if not os.access(NULL_MILTER, os.X_OK):
            pytest.skip("%s is not built (libmilter-dev was missing at meson setup)" % NULL_MILTER)
        made = []

        def make(**kw):
            made.append(NullMilter(**kw).start())
            return made[-1]
        yield make
        for f in made:
            f.stop()

    def test_opendkim_signature_verifies_at_the_sink(self, milter_host, opendkim):
        port, sink = milter_host(opendkim)
        # A line that starts with a dot: unstuffed by the host before signing.
        assert submit(port, message("signed", "Hello Bob,\n\nthis is signed.\n.dot\n")) == (250, "")
        data = delivered(sink)[0]
        assert header(data, "DKIM-Signature") is not None, data
        assert "d=example.test" in header(data, "DKIM-Signature")
        assert opendkim.verify(data), data
        # The verifier can say no: the same message with one body byte changed.
        assert not opendkim.verify(data.replace(b"this is signed", b"this is signeD"))

    def test_opendkim_signature_verifies_with_a_line_over_998_octets(self, milter_host, opendkim):
        """RFC 5322 allows 998 octets a line: a host either refuses a longer
        one or breaks it before the milters see the message; breaking it
        after signing (on the way out) breaks the signature."""
        port, sink = milter_host(opendkim)
        code, text = submit(port, message("long", "short\n%s\nend\n" % ("x" * 1500)))
        if code != 250:
            assert code // 100 == 5 and sink.count() == 0, (code, text)
            return
        data = delivered(sink)[0]
        assert max(len(line) for line in data.split(b"\r\n")) <= 998
        assert opendkim.verify(data), data

    def test_opendkim_signs_only_its_domain(self, milter_host, opendkim):
        port, sink = milter_host(opendkim)
        msg = message("not ours", "Hello.\n", sender="carol@other.test")
        assert submit(port, msg, sender="carol@other.test") == (250, "")
        assert header(delivered(sink)[0], "DKIM-Signature") is None

    def test_rspamd_rejects_gtube_with_its_reply(self, milter_host, rspamd):
        port, sink = milter_host(rspamd)
        code, text = submit(port, message("gtube", "Buy now.\n\n%s\n" % GTUBE))
        # rspamd's reply for a pre-result (GTUBE's), not its reject_message.
        assert code == 554 and text == "5.7.1 Gtube pattern", (code, text)
        assert sink.count() == 0

    def test_rspamd_adds_its_headers_to_a_clean_message(self, milter_host, rspamd):
        port, sink = milter_host(rspamd)
        assert submit(port, message("clean", "Hello Bob,\n\nsee you tomorrow.\n")) == (250, "")
        data = delivered(sink)[0]
        for name in ("X-Spamd-Result", "X-Rspamd-Server", "X-Rspamd-Queue-Id"):
            assert header(data, name) is not None, (name, data)
        assert header(data, "X-Spamd-Result").startswith("default: False"), data

    def test_spamass_milter_rejects_gtube(self, milter_host, spamd):
        with SpamassMilter(spamd, reject_score=15) as milter:
            port, sink = milter_host(milter)
            code, text = submit(port, message("gtube", "Buy now.\n\n%s\n" % GTUBE))
            assert code == 550 and "SpamAssassin" in text, (code, text)
            assert submit(port, message("clean", "Hello Bob,\n\nsee you tomorrow.\n")) == (250, "")
            data = delivered(sink)[0]
        assert header(data, "X-Spam-Status").startswith("No"), data

    def test_spamass_milter_tags_gtube(self, milter_host, spamd):
        with SpamassMilter(spamd) as milter:
            port, sink = milter_host(milter)
            assert submit(port, message("gtube", "Buy now.\n\n%s\n" % GTUBE)) == (250, "")
            data = delivered(sink)[0]
        assert header(data, "X-Spam-Flag") == "YES", data
        assert "GTUBE" in header(data, "X-Spam-Status")

    def test_null_milter_passes_mail_and_adds_a_header(self, milter_host, null_milter):
        port, sink = milter_host(null_milter(), null_milter(header="X-Null-Milter: seen"))
        assert submit(port, message("plain", "Hello Bob.\n")) == (250, "")
        data = delivered(sink)[0]
        assert header(data, "X-Null-Milter") == "seen"
        assert data.count(b"X-Null-Milter:") == 1
