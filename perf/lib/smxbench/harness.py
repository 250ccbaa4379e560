"""The integration tests' Relay and Sink (tests/integration/conftest.py) for
the perf scripts that run whole relays (crash-run, qmgr-restart)."""
import os
import sys
import types

from .env import ROOT


def import_helpers(build):
    """Relay and Sink from tests/integration/conftest.py, pointed at `build`.
    conftest needs pytest only for its fixtures, which are not used here."""
    os.environ["SMX_BUILD"] = os.path.abspath(build)
    try:
        import pytest  # noqa: F401
    except ImportError:
        sys.modules["pytest"] = types.SimpleNamespace(fixture=lambda f: f)
    sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
    import conftest
    return conftest
