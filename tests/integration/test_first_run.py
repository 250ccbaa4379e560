"""scripts/run builds only what `smx run` needs (issue 12, item 8)."""
import json
import os
import subprocess

from conftest import BUILD, REPO


def run_targets():
    r = subprocess.run(["bash", "-c", '. scripts/lib/setup.sh && echo "$SMX_RUN_TARGETS"'],
                       cwd=REPO, capture_output=True, text=True, check=True)
    return r.stdout.split()


def test_run_targets_are_the_programs_and_nothing_else():
    targets = run_targets()
    # The relay's four, and local submission's three (issue 26).
    assert sorted(os.path.basename(t) for t in targets) == \
        ["sendmail", "smx", "smx-pickup", "smx-postdrop", "smx-qmgr", "smx-smtpc", "smx-smtps"]
    with open(os.path.join(REPO, "scripts", "run")) as f:
        assert 'SMX_NINJA_TARGETS="$SMX_RUN_TARGETS"' in f.read()
    # Every command ninja would run to build them from scratch: the relay's
    # sources, none of the tests, benchmark tools or fuzz targets.
    r = subprocess.run(["ninja", "-C", BUILD, "-t", "commands", *targets],
                       capture_output=True, text=True, check=True)
    commands = r.stdout.splitlines()
    assert len(commands) > 20
    for t in targets:
        assert any(("-o " + t + " ") in c for c in commands), t
    for c in commands:
        for other in ("tests/", "perf/", "fuzz/", "catch"):
            assert other not in c, c


def test_tests_false_leaves_out_the_tests_and_benchmark_tools(tmp_path):
    """`meson setup -Dtests=false` (README, "Run it on a server"): a build of
    what is installed only. Configured, not built: that is the point."""
    build = str(tmp_path / "b")
    subprocess.run(["meson", "setup", build, REPO, "-Dtests=false"], capture_output=True,
                   text=True, check=True, timeout=300)
    r = subprocess.run(["meson", "introspect", "--targets", build], capture_output=True,
                       text=True, check=True)
    targets = json.loads(r.stdout)
    dirs = {os.path.relpath(t["defined_in"], REPO).split("/")[0] for t in targets}
    assert "tests" not in dirs and "perf" not in dirs, dirs
    names = {t["name"] for t in targets}
    assert {"smx", "smx-qmgr", "smx-smtps", "smx-smtpc", "smx.toml.5"} <= names
