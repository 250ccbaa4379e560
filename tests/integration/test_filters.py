"""The real filters of filters.py with smx as the milter host ([milter]
smtpd_milters): OpenDKIM's signature verifies at the sink after smx's own
changes (its Received:, a line over 998 octets), rspamd rejects GTUBE at end
of data with its own reply and adds its headers, spamass-milter rejects or
tags GTUBE, the null milter's header arrives. The checks are
milter_checks.py's, the same that test_filters_postfix.py runs with postfix."""
import subprocess

import pytest

from conftest import SMX, Raw
from milter_checks import RCPT, SENDER, MilterHostChecks, delivered, header, message, submit


def knows_milters():
    """The build has [milter] smtpd_milters (smx config lists the key)."""
    return subprocess.run([SMX, "config", "-d", "milter.smtpd_milters"],
                          capture_output=True).returncode == 0


pytestmark = pytest.mark.skipif(not knows_milters(), reason="smx has no milter support in this build")


class TestSmxHost(MilterHostChecks):
    @pytest.fixture
    def milter_host(self, make_sink, make_relay, tmp_path):
        made = []

        def make(*milters):
            sink = make_sink(sub="sink%d" % len(made))
            tmp = tmp_path / ("relay%d" % len(made))
            tmp.mkdir()
            made.append(make_relay(sink.port, "[milter]\nsmtpd_milters = [%s]" % ", ".join(
                '"%s"' % m.socket for m in milters), tmp=str(tmp)))
            return made[-1].port, sink
        return make

    def test_smx_received_header_is_outside_the_signature(self, milter_host, opendkim):
        port, sink = milter_host(opendkim)
        assert submit(port, message("signed", "Hello.\n")) == (250, "")
        data = delivered(sink)[0]
        # Wherever smx's Received: and OpenDKIM's field stand, neither breaks the other.
        assert "by smx.test" in header(data, "Received"), data
        assert header(data, "DKIM-Signature") is not None, data
        assert opendkim.verify(data)

    # Under 256 KiB a message goes into a content segment, over it into a
    # file of its own; DATA or BDAT in two chunks: whichever way smx stores
    # the message, what goes out is what OpenDKIM signed.
    @pytest.mark.parametrize("size", [2000, 400 * 1024])
    @pytest.mark.parametrize("bdat", [False, True])
    def test_opendkim_signature_verifies_for_each_way_of_storing(self, milter_host, opendkim, size, bdat):
        port, sink = milter_host(opendkim)
        msg = message("stored", "\n".join("line %06d %s" % (i, "x" * 60) for i in range(size // 72)))
        if bdat:
            c = Raw(port)
            for line in ("EHLO client.test", "MAIL FROM:<%s>" % SENDER, "RCPT TO:<%s>" % RCPT):
                assert c.cmd(line).startswith("250")
            half = len(msg) // 2
            c.send(b"BDAT %d\r\n" % half + msg[:half])
            assert c.reply().startswith("250")
            c.send(b"BDAT %d LAST\r\n" % (len(msg) - half) + msg[half:])
            assert c.reply().startswith("250")
            c.close()
        else:
            assert submit(port, msg) == (250, "")
        data = delivered(sink)[0]
        assert header(data, "DKIM-Signature") is not None and opendkim.verify(data)
