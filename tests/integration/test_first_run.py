"""scripts/run builds only what `smx run` needs (issue 12, item 8), and the
README's first command works as written, as root and as another user
(issue 26, item 1)."""
import grp
import json
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time

import pytest

from conftest import BUILD, REPO, free_port, send, wait_until


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


# The README's first command as written (issue 26, item 1): a fresh clone,
# scripts/run from a new empty directory elsewhere, the default spool
# (./var/spool there), a mail relayed. Only the port and the next hop come
# from a config: 127.0.0.1:2525 may be taken by another run of the tests.
# A shell in a fresh clone has no CCACHE_BASEDIR of another tree; with it
# gone, the clone's build reuses the objects of the build under test.
CLONE_ENV = {k: v for k, v in os.environ.items()
             if not k.startswith(("CCACHE_BASEDIR", "SMX_", "ASAN_", "LSAN_", "UBSAN_"))}


def new_dir(prefix):
    d = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    os.chmod(d, 0o755)  # as mkdir under umask 022 makes it
    return d


@pytest.fixture(scope="module")
def clone():
    """A clone of the committed tree, built once by its scripts/run (as
    `scripts/run --version`, which builds, then prints the version)."""
    top = new_dir("smx-clone-")
    src = os.path.join(top, "smx")
    subprocess.run(["git", "clone", "-q", REPO, src], check=True, timeout=300)
    t0 = time.monotonic()
    r = subprocess.run([os.path.join(src, "scripts", "run"), "--version"], cwd=top,
                       env=CLONE_ENV, capture_output=True, text=True, timeout=1800)
    took = time.monotonic() - t0
    assert r.returncode == 0 and r.stdout.startswith("smx "), r.stderr[-3000:]
    print("scripts/run built the clone in %.0f s" % took)
    yield src
    shutil.rmtree(top, ignore_errors=True)


def run_readme(clone, cwd, sink, user=None):
    """scripts/run -c smx.toml in cwd (as user: setpriv), until it greets."""
    port = free_port()
    with open(os.path.join(cwd, "smx.toml"), "w") as f:
        f.write('[server]\nlisten = ["127.0.0.1:%d"]\n[routes]\ndefault = "[127.0.0.1]:%d"\n'
                % (port, sink.port))
    env = dict(CLONE_ENV)
    cmd = [os.path.join(clone, "scripts", "run"), "-c", "smx.toml"]
    if user:
        pw = pwd.getpwnam(user)
        env.update(HOME=cwd, USER=user, LOGNAME=user)
        cmd = ["setpriv", "--reuid", str(pw.pw_uid), "--regid", str(pw.pw_gid),
               "--clear-groups", "--"] + cmd
    log = open(os.path.join(cwd, "run.log"), "wb")
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)

    def greets():
        if proc.poll() is not None:
            with open(log.name, errors="replace") as f:
                raise AssertionError("scripts/run exited with %s:\n%s" % (proc.returncode, f.read()))
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                return s.recv(512).startswith(b"220")
        except OSError:
            return False
    wait_until(greets, 300, "scripts/run to answer on port %d" % port)
    return proc, port


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0


def test_readme_scripts_run_as_root_from_a_new_directory(clone, sink):
    cwd = new_dir("smx-readme-root-")
    proc, port = run_readme(clone, cwd, sink)
    try:
        send(port, "a@client.test", ["r@example.net"], b"Subject: readme\r\n\r\nfirst\r\n")
        wait_until(lambda: sink.count() == 1, 30, "the mail at the next hop")
        # ./var made passable; the spool is the children's group's.
        assert stat.S_IMODE(os.stat(os.path.join(cwd, "var")).st_mode) == 0o755
        spool = os.stat(os.path.join(cwd, "var", "spool"))
        assert (spool.st_uid, grp.getgrgid(spool.st_gid).gr_name) == (0, "smx")
        assert os.path.isdir(os.path.join(cwd, "var", "spool", "ibdb"))
    finally:
        stop(proc)
    shutil.rmtree(cwd)


def test_readme_scripts_run_as_root_names_a_directory_its_accounts_cannot_pass(clone, sink):
    cwd = new_dir("smx-readme-home-")
    os.chmod(cwd, 0o700)  # as /root: the children's accounts cannot pass
    with open(os.path.join(cwd, "smx.toml"), "w") as f:
        f.write('[server]\nlisten = ["127.0.0.1:%d"]\n' % free_port())
    os.chmod(os.path.join(cwd, "smx.toml"), 0o644)
    r = subprocess.run([os.path.join(clone, "scripts", "run"), "-c", "smx.toml"], cwd=cwd,
                       env=CLONE_ENV, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1
    assert ("smxs (smx-smtps) cannot pass through %s (0700 root:root) on its way to "
            "%s/var/spool/cdb" % (cwd, cwd)) in r.stderr, r.stderr[-2000:]
    shutil.rmtree(cwd)


def test_readme_scripts_run_as_an_unprivileged_user(clone, sink):
    """The clone is the user's (as one they made); its build is already
    there, so scripts/run only checks the packages and the build."""
    user = "nobody"
    subprocess.run(["chown", "-R", user, clone], check=True)
    cwd = new_dir("smx-readme-user-")
    os.chown(cwd, pwd.getpwnam(user).pw_uid, -1)
    try:
        proc, port = run_readme(clone, cwd, sink, user=user)
        try:
            send(port, "a@client.test", ["r@example.net"], b"Subject: readme\r\n\r\nuser\r\n")
            wait_until(lambda: sink.count() == 1, 30, "the mail at the next hop")
            spool = os.stat(os.path.join(cwd, "var", "spool", "ibdb"))
            assert spool.st_uid == pwd.getpwnam(user).pw_uid
        finally:
            stop(proc)
    finally:
        subprocess.run(["chown", "-R", "root", clone], check=True)
    shutil.rmtree(cwd)
