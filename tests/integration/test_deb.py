"""The Debian package (issue 12, item 1): built from a copy of the tree with
dpkg-buildpackage, installed with dpkg on this machine, run the way its unit
runs it, purged.

It installs to /usr and /etc: it holds a machine-wide lock so that two runs
(two worktrees) never overlap, uses a free port, and refuses to touch a
machine where smx is installed already."""
import fcntl
import os
import pwd
import grp
import re
import shutil
import smtplib
import stat
import subprocess
import time

import pytest

from conftest import REPO, free_port, wait_until

LOCK = "/run/lock/smx-test-deb.lock"
CONFIG = "/etc/smx/smx.toml"
# What the package makes outside its file list (postinst, smx run); purge
# removes them all. /etc/smx holds the conffile.
RUNTIME_PATHS = ["/etc/smx", "/var/spool/smx", "/run/smx", "/var/log/smx"]


def meson_version():
    with open(os.path.join(REPO, "meson.build")) as f:
        return re.search(r"version : '([^']+)'", f.read()).group(1)


def control_field(name):
    with open(os.path.join(REPO, "debian", "control")) as f:
        text = re.sub(r"^#.*\n", "", f.read(), flags=re.M)
    m = re.search(r"^%s:(.*(?:\n[ \t].*)*)" % name, text, flags=re.M)
    return [d.strip() for d in m.group(1).split(",") if d.strip()]


def setup_packages(var):
    r = subprocess.run(["bash", "-c", '. scripts/lib/setup.sh && echo "$%s"' % var],
                       cwd=REPO, capture_output=True, text=True, check=True)
    return set(r.stdout.split())


def test_changelog_version_is_the_meson_version():
    with open(os.path.join(REPO, "debian", "changelog")) as f:
        first = f.readline()
    assert first.startswith("smx (%s) " % meson_version()), first


def test_build_depends_are_installed_by_setup_sh():
    """A fresh machine gets every build dependency from scripts/lib/setup.sh
    (SMX_PACKAGES, and SMX_DEB_PACKAGES for the packaging tools)."""
    names = {d.split()[0] for d in control_field("Build-Depends")}
    assert "debhelper-compat" in names
    names.discard("debhelper-compat")
    assert names <= setup_packages("SMX_PACKAGES"), names - setup_packages("SMX_PACKAGES")
    assert {"debhelper", "build-essential"} <= setup_packages("SMX_DEB_PACKAGES")


def copy_tree(dest):
    """The source tree without build directories, git data or earlier
    package builds (dpkg-buildpackage writes next to the tree: dest's parent)."""
    def ignore(d, names):
        if os.path.abspath(d) == REPO:
            return [n for n in names if n.startswith(("build", "obj-", ".git", "var"))]
        if os.path.abspath(d) == os.path.join(REPO, "debian"):
            return [n for n in names if n in ("smx", ".debhelper", "tmp", "files")
                    or n.endswith((".substvars", ".log", "-stamp"))]
        return [n for n in names if n == "__pycache__"]
    shutil.copytree(REPO, dest, ignore=ignore, symlinks=True)


@pytest.fixture(scope="module")
def deb(tmp_path_factory):
    for tool in ("dpkg-buildpackage", "dh", "dpkg-checkbuilddeps"):
        if not shutil.which(tool):
            pytest.skip("%s is not installed (apt-get install debhelper build-essential)" % tool)
    work = tmp_path_factory.mktemp("deb")
    src = work / "smx"
    copy_tree(src)
    r = subprocess.run(["dpkg-checkbuilddeps"], cwd=src, capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("build dependencies missing: %s" % r.stderr.strip())
    # Two jobs, as every build here. noopt (-O0): the test checks what the
    # package installs and that it runs, not its speed, and it compiles in
    # about half the time. ccache hits across runs in other temporary
    # directories with the paths made relative to this one, in the user's
    # cache: debhelper sets HOME to a new directory in the tree, where ccache
    # would start an empty one (a build took 3m46s, with the cache 31s).
    env = dict(os.environ, DEB_BUILD_OPTIONS="parallel=2 noopt", CCACHE_BASEDIR=str(work),
               CCACHE_NOHASHDIR="1")
    if shutil.which("ccache"):
        cache = subprocess.run(["ccache", "-k", "cache_dir"], capture_output=True, text=True).stdout.strip()
        if cache:
            env["CCACHE_DIR"] = cache
    t0 = time.monotonic()
    r = subprocess.run(["dpkg-buildpackage", "-us", "-uc", "-b"], cwd=src, env=env,
                       capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    print("dpkg-buildpackage took %.0f s" % (time.monotonic() - t0))
    debs = [p for p in work.iterdir() if re.fullmatch(r"smx_[^_]+_[a-z0-9]+\.deb", p.name)]
    assert len(debs) == 1, sorted(p.name for p in work.iterdir())
    return debs[0]


def contents(deb):
    """(path, mode string, owner) of every entry of the package."""
    r = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True)
    out = []
    for line in r.stdout.splitlines():
        mode, owner, _, _, _, path = line.split(None, 5)
        out.append((path.split(" -> ")[0].lstrip(".") or "/", mode, owner))
    return out


def test_package_ships_the_programs_config_unit_and_manual(deb):
    files = {p: (m, o) for p, m, o in contents(deb) if not m.startswith("d")}
    for prog in ("/usr/sbin/smx", "/usr/libexec/smx/smx-qmgr", "/usr/libexec/smx/smx-smtps",
                 "/usr/libexec/smx/smx-smtpc"):
        assert files[prog] == ("-rwxr-xr-x", "root/root"), prog
    for f in (CONFIG, "/usr/share/smx/smx.toml", "/lib/systemd/system/smx.service",
              "/usr/lib/sysusers.d/smx.conf", "/usr/lib/tmpfiles.d/smx.conf",
              "/usr/share/man/man8/smx.8.gz", "/usr/share/man/man5/smx.toml.5.gz",
              "/usr/share/doc/smx/README.Debian"):
        assert files[f] == ("-rw-r--r--", "root/root"), f
    # Only what is installed: no test or benchmark programs, no spool (postinst
    # makes it with its group).
    assert not [p for p in files if "/test" in p or "bench" in p]
    assert not [p for p, _, _ in contents(deb) if p.startswith("/var/")]
    info = subprocess.run(["dpkg-deb", "-I", str(deb)], capture_output=True, text=True,
                          check=True).stdout
    assert re.search(r"^ Depends:.*\bsystemd\b", info, flags=re.M), info


def installed(name="smx"):
    r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", name], capture_output=True,
                       text=True)
    return r.returncode == 0 and r.stdout.endswith(" installed")


def dpkg(*args):
    r = subprocess.run(["dpkg", *args], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def mode_owner(path):
    st = os.stat(path)
    return (oct(stat.S_IMODE(st.st_mode)), pwd.getpwuid(st.st_uid).pw_name,
            grp.getgrgid(st.st_gid).gr_name)


@pytest.fixture
def machine():
    """This machine, locked for the test, with smx not installed."""
    if os.geteuid() != 0:
        pytest.skip("dpkg -i needs root")
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if installed():
            pytest.skip("the package smx is installed on this machine: the test would remove it")
        there = [p for p in RUNTIME_PATHS + ["/usr/sbin/smx"] if os.path.lexists(p)]
        if there:
            pytest.skip("%s exist(s) without the package (meson install?): the test would "
                        "overwrite or remove them" % ", ".join(there))
        try:
            yield
        finally:
            if installed() or subprocess.run(["dpkg-query", "-W", "smx"],
                                             capture_output=True).returncode == 0:
                subprocess.run(["dpkg", "--purge", "smx"], capture_output=True)


def smx(*args, timeout=30):
    return subprocess.run(["/usr/sbin/smx", *args], capture_output=True, text=True,
                          timeout=timeout)


def children_users(pid):
    users = {}
    for p in os.listdir("/proc"):
        try:
            with open("/proc/%s/stat" % p) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid == pid:
                with open("/proc/%s/cmdline" % p, "rb") as f:
                    name = os.path.basename(f.read().split(b"\0")[0].decode())
                users[name] = pwd.getpwuid(os.stat("/proc/%s" % p).st_uid).pw_name
        except (OSError, ValueError):
            continue
    return users


def test_install_check_run_send_and_purge(deb, machine, sink, tmp_path):
    shipped = [p for p, m, _ in contents(deb) if not m.startswith("d")]
    dpkg("-i", str(deb))
    assert installed()

    # postinst: the accounts (systemd-sysusers) and the spool (systemd-tmpfiles).
    assert {"smxs", "smxq", "smxc"} <= {u.pw_name for u in pwd.getpwall()}
    assert grp.getgrnam("smx")
    assert mode_owner("/var/spool/smx") == ("0o750", "root", "smx")
    assert mode_owner(CONFIG) == ("0o644", "root", "root")
    assert mode_owner("/usr/sbin/smx") == ("0o755", "root", "root")
    conffiles = subprocess.run(["dpkg-query", "-W", "-f=${Conffiles}", "smx"],
                               capture_output=True, text=True, check=True).stdout
    assert [l.split()[0] for l in conffiles.strip().splitlines()] == [CONFIG]
    # Installed, neither enabled nor started: no wants link (deb-systemd-helper
    # makes it without systemd running too), no start in postinst.
    assert os.path.exists("/lib/systemd/system/smx.service")
    assert not os.path.lexists("/etc/systemd/system/multi-user.target.wants/smx.service")
    with open("/var/lib/dpkg/info/smx.postinst") as f:
        postinst = f.read()
    assert "systemd-sysusers" in postinst and "systemd-tmpfiles" in postinst
    assert "_dh_action=start" not in postinst

    # The installed config as it comes, with -c and by default.
    for args in (["check-config", "-c", CONFIG], ["check-config"]):
        r = smx(*args)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("config OK (/etc/smx/smx.toml)\n"), r.stdout
        assert "spool:  /var/spool/smx " in r.stdout and "run:    /run/smx\n" in r.stdout

    # The administrator's edit: a free loopback port and the sink as smart host.
    port = free_port()
    with open(CONFIG) as f:
        text = f.read()
    text, n1 = re.subn(r'^listen = \["127.0.0.1:2525"\]', 'listen = ["127.0.0.1:%d"]' % port,
                       text, flags=re.M)
    text, n2 = re.subn(r'^#default = .*$', 'default = "[127.0.0.1]:%d"' % sink.port, text,
                       flags=re.M)
    assert (n1, n2) == (1, 1)
    with open(CONFIG, "w") as f:
        f.write(text)

    # As the unit: ExecStartPre, RuntimeDirectory=smx (0755), ExecStart, as root.
    assert smx("check-config", "-c", CONFIG).returncode == 0
    os.makedirs("/run/smx", mode=0o755, exist_ok=True)
    log = open(tmp_path / "smx.log", "wb")
    proc = subprocess.Popen(["/usr/sbin/smx", "run", "-c", CONFIG], stdout=log,
                            stderr=subprocess.STDOUT)
    def log_text():
        return (tmp_path / "smx.log").read_text(errors="replace")
    try:
        wait_until(lambda: proc.poll() is not None or "ready: smx-smtps answers" in log_text(),
                   60, "ready")
        assert proc.poll() is None, log_text()
        assert children_users(proc.pid) == {"smx-qmgr": "smxq", "smx-smtps": "smxs",
                                            "smx-smtpc": "smxc"}, log_text()
        with smtplib.SMTP("127.0.0.1", port, timeout=30) as s:
            s.sendmail("alice@example.org", ["bob@example.net"],
                       b"Subject: from the package\r\n\r\nhello\r\n")
        wait_until(lambda: sink.count() == 1, 30, "the mail at the sink")
        assert sink.messages()[0]["rcpts"] == ["bob@example.net"]
        # The queue tools without -c read /etc/smx/smx.toml and find its QMGR.
        wait_until(lambda: re.search(r"^delivered 1$", smx("stats").stdout, flags=re.M), 10,
                   "delivered 1")
        r = smx("queue")
        assert r.returncode == 0, r.stderr
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
    assert proc.returncode == 0, log_text()
    assert "config: /etc/smx/smx.toml" in log_text()

    dpkg("--purge", "smx")
    assert not installed()
    left = [p for p in RUNTIME_PATHS + shipped if os.path.lexists(p)]
    assert left == []
    # The accounts stay (Debian practice; debian/postrm says why).
    assert pwd.getpwnam("smxq")
