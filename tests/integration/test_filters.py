"""The real filters of filters.py with smx as the milter host ([milter]
smtpd_milters): OpenDKIM's signature verifies at the sink after smx's own
changes (its Received:, a line over 998 octets), rspamd rejects GTUBE at end
of data with its own reply and adds its headers, spamass-milter rejects or
tags GTUBE, the null milter's header arrives. The checks are
milter_checks.py's, the same that test_filters_postfix.py runs with postfix."""
import subprocess

import pytest

from conftest import SMX
from milter_checks import MilterHostChecks, delivered, header, message, submit


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
