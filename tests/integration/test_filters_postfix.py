"""The real filters of filters.py with a private postfix as the milter host:
proof that the fixtures do what test_filters.py then asks of smx (an
OpenDKIM signature that verifies, rspamd's and SpamAssassin's verdicts on
GTUBE, the null milter's header). They test the fixtures, not smx, and
take a minute and a half: they run when SMX_POSTFIX_MILTER_TESTS=1 (after
a change to filters.py), and are reported skipped otherwise, which keeps
CI within its 30 minutes."""
import os
import shutil

import pytest

from conftest import free_port
from milter_checks import MilterHostChecks
from postfix_peer import RELAY_TO_SINK_CF, PrivatePostfix

pytestmark = [
    pytest.mark.skipif(os.environ.get("SMX_POSTFIX_MILTER_TESTS") != "1",
                       reason="postfix as the milter host proves the fixtures only: "
                              "SMX_POSTFIX_MILTER_TESTS=1 runs it"),
    pytest.mark.skipif(
        not shutil.which("postfix") or not shutil.which("openssl") or os.geteuid() != 0,
        reason="needs the postfix and openssl packages and root (postfix's own users)")]

MAIN_CF = "myhostname = postfix-milter.test\n" + RELAY_TO_SINK_CF + """\
smtpd_milters = {milters}
milter_default_action = tempfail
"""


class TestPostfixHost(MilterHostChecks):
    @pytest.fixture
    def milter_host(self, make_sink):
        made = []

        def make(*milters):
            sink = make_sink(sub="sink%d" % len(made))
            made.append(PrivatePostfix(free_port(), "milter", MAIN_CF.format(
                sink=sink.port, milters=" ".join(m.socket for m in milters))))
            return made[-1].port, sink
        yield make
        for p in made:
            p.stop()

    # postfix signs what its smtpd received and breaks lines over
    # smtp_line_length_limit (998) on the way out, after the milters: the
    # signature no longer verifies. Kept, strict, as proof that the check
    # catches a host that breaks lines after signing.
    test_opendkim_signature_verifies_with_a_line_over_998_octets = pytest.mark.xfail(
        strict=True, reason="postfix breaks long lines after its milters signed")(
        MilterHostChecks.test_opendkim_signature_verifies_with_a_line_over_998_octets)
