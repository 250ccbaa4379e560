"""The Debian package (issue 12, item 1; issue 26, item 8): built from a copy
of the tree with dpkg-buildpackage (once: the next version is the same
package repacked with a higher version), installed, upgraded, removed and
purged with apt and dpkg, and run the way its unit runs it.

The package provides and conflicts with mail-transport-agent, so installing
it removes the MTA there is (this machine has postfix for other tests). So
it is installed in a chroot of this machine's / through an overlay on a
tmpfs, where a stand-in systemctl runs the unit for the maintainer scripts;
the machine's packages and files are never touched. A machine-wide lock
keeps two runs (two worktrees) apart; the relay uses a free port."""
import fcntl
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
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


# The version an upgrade goes to (the package repacked, next_deb).
NEXT_VERSION = meson_version() + "+next"

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


@pytest.fixture(scope="module")
def next_deb(deb, tmp_path_factory):
    """The package as the next release: the same files and maintainer
    scripts with a higher Version, repacked rather than built again (a
    second build would double the test's time). dpkg upgrades to it as to
    any newer version: it runs the same scripts with the same arguments."""
    work = tmp_path_factory.mktemp("next")
    tree = work / "tree"
    subprocess.run(["dpkg-deb", "-R", str(deb), str(tree)], check=True)
    control = tree / "DEBIAN" / "control"
    text, n = re.subn(r"^Version: .*$", "Version: " + NEXT_VERSION, control.read_text(),
                      count=1, flags=re.M)
    assert n == 1, text
    control.write_text(text)
    out = work / deb.name.replace("_%s_" % meson_version(), "_%s_" % NEXT_VERSION)
    # Uncompressed: it is unpacked once, right away.
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Znone", "-b", str(tree), str(out)],
                   check=True, capture_output=True)
    return out


def contents(deb):
    """(path, mode string, owner) of every entry of the package."""
    r = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True)
    out = []
    for line in r.stdout.splitlines():
        mode, owner, _, _, _, path = line.split(None, 5)
        out.append((path.split(" -> ")[0].lstrip(".") or "/", mode, owner))
    return out


def test_package_ships_the_programs_config_unit_manual_and_docs(deb):
    entries = contents(deb)
    files = {p: (m, o) for p, m, o in entries if not m.startswith("d")}
    for prog in ("/usr/sbin/smx", "/usr/libexec/smx/smx-qmgr", "/usr/libexec/smx/smx-smtps",
                 "/usr/libexec/smx/smx-smtpc", "/usr/libexec/smx/smx-pickup",
                 "/usr/sbin/sendmail",
                 # setgid smxdrop by dpkg-statoverride in postinst: the group
                 # may not exist where the package is built.
                 "/usr/libexec/smx/smx-postdrop"):
        assert files[prog] == ("-rwxr-xr-x", "root/root"), prog
    links = {p: m for p, m, _ in entries if m.startswith("l")}
    assert set(links) >= {"/usr/bin/mailq", "/usr/bin/newaliases",
                          "/usr/share/man/man8/mailq.8.gz", "/usr/share/man/man8/newaliases.8.gz"}
    for f in (CONFIG, "/usr/share/smx/smx.toml", "/lib/systemd/system/smx.service",
              "/usr/lib/sysusers.d/smx.conf", "/usr/lib/tmpfiles.d/smx.conf",
              "/usr/share/man/man8/smx.8.gz", "/usr/share/man/man5/smx.toml.5.gz",
              "/usr/share/man/man8/sendmail.8.gz", "/usr/share/man/man8/smx-pickup.8.gz",
              "/usr/share/man/man8/smx-postdrop.8.gz",
              "/usr/share/doc/smx/README.Debian", "/usr/share/doc/smx/copyright",
              # Uncompressed: the manual pages name them so.
              "/usr/share/doc/smx/README.md", "/usr/share/doc/smx/operation.md",
              "/usr/share/doc/smx/design.md", "/usr/share/doc/smx/config.md"):
        assert files[f] == ("-rw-r--r--", "root/root"), f
    # Only what is installed: no test or benchmark programs, no spool (postinst
    # makes it with its group).
    assert not [p for p in files if ("/test" in p or "bench" in p)
                and not p.startswith("/usr/share/doc/smx/")]
    assert not [p for p, _, _ in entries if p.startswith("/var/")]
    info = subprocess.run(["dpkg-deb", "-I", str(deb)], capture_output=True, text=True,
                          check=True).stdout
    assert re.search(r"^ Depends:.*\bsystemd\b", info, flags=re.M), info
    for field in ("Provides", "Conflicts", "Replaces"):
        assert re.search(r"^ %s: mail-transport-agent$" % field, info, flags=re.M), info


def test_license_is_apache_2_and_the_copyright_file_says_so():
    with open(os.path.join(REPO, "LICENSE")) as f:
        text = f.read()
    with open("/usr/share/common-licenses/Apache-2.0") as f:
        assert text == f.read()
    with open(os.path.join(REPO, "debian", "copyright")) as f:
        copyright = f.read()
    assert copyright.startswith("Format: https://www.debian.org/doc/packaging-manuals/"
                                "copyright-format/1.0/\n")
    assert re.search(r"^Files: \*\nCopyright: .+\nLicense: Apache-2.0\n", copyright, re.M)
    assert "/usr/share/common-licenses/Apache-2.0" in copyright


def host_installed(name):
    r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", name], capture_output=True,
                       text=True)
    return r.returncode == 0 and r.stdout.endswith(" installed")


# A stand-in for systemctl in the chroot (there is no systemd here): it logs
# every call and runs smx.service as its unit does (ExecStartPre, ExecStart,
# SIGTERM to stop), so that the maintainer scripts' deb-systemd-invoke
# starts, restarts and stops a real smx run. A unit is enabled when its
# multi-user.target.wants link exists, as deb-systemd-helper makes it.
FAKE_SYSTEMCTL = r"""#!/bin/sh
set -- $(for a in "$@"; do case "$a" in -*) ;; *) echo "$a";; esac; done)
echo "systemctl $*" >> /var/log/fake-systemctl.log
action="$1"; unit="$2"
pidfile=/run/fake-smx.pid
active() { [ -f $pidfile ] && kill -0 "$(cat $pidfile)" 2>/dev/null; }
stop() {
  if active; then
    pid=$(cat $pidfile); kill -TERM "$pid"
    i=0; while kill -0 "$pid" 2>/dev/null && [ $i -lt 150 ]; do sleep 0.1; i=$((i+1)); done
  fi
  rm -f $pidfile
}
start() {
  active && return 0
  mkdir -p -m 0755 /run/smx
  /usr/sbin/smx check-config -c /etc/smx/smx.toml >> /var/log/fake-smx.log 2>&1 || return 1
  setsid /usr/sbin/smx run -c /etc/smx/smx.toml >> /var/log/fake-smx.log 2>&1 < /dev/null &
  echo $! > $pidfile
}
case "$action" in
  is-enabled)
    if [ -L "/etc/systemd/system/multi-user.target.wants/$unit" ]; then echo enabled; exit 0; fi
    echo disabled; exit 1 ;;
  is-active) [ "$unit" = smx.service ] && active && exit 0; exit 3 ;;
  start) [ "$unit" = smx.service ] && start; exit $? ;;
  stop) [ "$unit" = smx.service ] && stop; exit 0 ;;
  restart|try-restart) [ "$unit" = smx.service ] || exit 0; stop; start; exit $? ;;
  *) exit 0 ;;
esac
"""


class Chroot:
    """This machine's / through an overlay whose writes go to a tmpfs, with
    its own /proc, /dev, /run and /tmp: apt, dpkg and the maintainer scripts
    run chrooted in it, so the machine's packages (its postfix among them)
    and files are never touched; unmounting throws every change away."""

    def __init__(self, base):
        self.base = base
        self.root = os.path.join(base, "root")
        self.rw = os.path.join(base, "rw")

    def setup(self):
        for d in (self.root, self.rw):
            os.makedirs(d)
        mount("-t", "tmpfs", "-o", "size=2g", "tmpfs", self.rw)
        for d in ("upper", "work"):
            os.mkdir(os.path.join(self.rw, d))
        mount("-t", "overlay", "-o", "lowerdir=/,upperdir=%s/upper,workdir=%s/work" %
              (self.rw, self.rw), "overlay", self.root)
        mount("-t", "proc", "proc", self.path("/proc"))
        # /dev alone (not its submounts), private: unmounting it never
        # reaches the machine's /dev.
        mount("--bind", "/dev", self.path("/dev"))
        mount("--make-private", self.path("/dev"))
        for d in ("/run", "/tmp"):
            mount("-t", "tmpfs", "tmpfs", self.path(d))
        os.chmod(self.path("/tmp"), 0o1777)
        # deb-systemd-invoke acts only where systemd runs, and not at all
        # where a policy-rc.d forbids it (containers have one that does).
        os.makedirs(self.path("/run/systemd/system"))
        os.makedirs(self.path("/run/lock"))
        for f in ("/usr/sbin/policy-rc.d", "/usr/bin/systemctl"):
            if os.path.lexists(self.path(f)):
                os.unlink(self.path(f))
        with open(self.path("/usr/bin/systemctl"), "w") as f:
            f.write(FAKE_SYSTEMCTL)
        os.chmod(self.path("/usr/bin/systemctl"), 0o755)

    def path(self, p):
        return os.path.join(self.root, p.lstrip("/"))

    def run(self, *cmd, user=None, input=None, check=True, timeout=600):
        spec = ["--userspec=%s" % user] if user else []
        r = subprocess.run(["chroot", *spec, self.root, *cmd], input=input, capture_output=True,
                           timeout=timeout, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                                                 "DEBIAN_FRONTEND": "noninteractive",
                                                 "LC_ALL": "C.UTF-8", "HOME": "/root"})
        if check:
            assert r.returncode == 0, "%s: exit %d\n%s\n%s" % (
                " ".join(cmd), r.returncode, r.stdout.decode(errors="replace")[-3000:],
                r.stderr.decode(errors="replace")[-3000:])
        return r

    def read(self, p):
        try:
            with open(self.path(p), errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def name(self, db, id):
        """The name of a uid (db /etc/passwd) or gid (/etc/group) in the
        chroot, where the package made its accounts."""
        names = [l.split(":")[0] for l in self.read(db).splitlines() if l.split(":")[2] == str(id)]
        assert names, (db, id)
        return names[0]

    def smx_pid(self):
        """The running smx run started by the stand-in systemctl, or None."""
        try:
            pid = int(self.read("/run/fake-smx.pid"))
            os.kill(pid, 0)
            return pid
        except (ValueError, ProcessLookupError):
            return None

    def mounted(self):
        with open("/proc/self/mounts") as f:
            return [l.split()[1] for l in f if l.split()[1].startswith(self.base + "/")]

    def close(self):
        """Every process in the chroot killed, everything unmounted, the
        directory removed (only once nothing is mounted in it: a mount left
        there would be removed through)."""
        for p in os.listdir("/proc"):
            try:
                if p.isdigit() and os.readlink("/proc/%s/root" % p).startswith(self.root):
                    os.kill(int(p), signal.SIGKILL)
            except (FileNotFoundError, ProcessLookupError):
                continue  # it has exited meanwhile
            except PermissionError:
                continue  # not ours to look at (a container's init): not in the chroot
        subprocess.run(["umount", "-R", "-l", self.root], capture_output=True)
        subprocess.run(["umount", "-l", self.rw], capture_output=True)
        left = self.mounted()
        assert not left, "still mounted, %s left in place: %s" % (self.base, left)
        shutil.rmtree(self.base)


def mount(*args):
    subprocess.run(["mount", *args], check=True, capture_output=True)


@pytest.fixture
def chroot():
    if os.geteuid() != 0:
        pytest.skip("mounting an overlay and dpkg need root")
    # One package test at a time on the machine (two worktrees).
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        c = Chroot(tempfile.mkdtemp(prefix="smx-deb-", dir="/tmp"))
        try:
            try:
                c.setup()
            except subprocess.CalledProcessError as e:
                pytest.skip("cannot make a chroot through an overlay of / here: %s: %s" %
                            (" ".join(e.cmd), e.stderr.decode().strip()))
            yield c
        finally:
            c.close()


def children_users(c, pid):
    """The program and account of each child of pid, a process in c."""
    users = {}
    for p in os.listdir("/proc"):
        try:
            with open("/proc/%s/stat" % p) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid == pid:
                with open("/proc/%s/cmdline" % p, "rb") as f:
                    name = os.path.basename(f.read().split(b"\0")[0].decode())
                users[name] = c.name("/etc/passwd", os.stat("/proc/%s" % p).st_uid)
        except (OSError, ValueError):
            continue
    return users


def mode_owner(c, path):
    st = os.stat(c.path(path))
    return (oct(stat.S_IMODE(st.st_mode)), c.name("/etc/passwd", st.st_uid),
            c.name("/etc/group", st.st_gid))


def serving(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            return s.recv(512).startswith(b"220")
    except OSError:
        return False


def test_install_upgrade_remove_in_a_chroot(deb, next_deb, chroot, sink):
    """The administrator's day: apt install (it removes the MTA there was,
    in the chroot only), the service not started; sendmail before it ever
    ran; enable and start; upgrade to the next version (restarted once, after
    the new files are in place); a stopped, disabled one stays stopped on
    upgrade, a running one is restarted; remove (stopped), purge."""
    c = chroot
    for d in (deb, next_deb):
        shutil.copy(d, c.path("/tmp"))
    had_postfix = host_installed("postfix")

    def calls_since(mark):
        """The stand-in systemctl's calls on smx.service since mark."""
        return [l for l in c.read("/var/log/fake-systemctl.log").splitlines()[mark:]
                if l.endswith(" smx.service")]

    def mark():
        return len(c.read("/var/log/fake-systemctl.log").splitlines())

    # apt resolves the Conflicts with mail-transport-agent by removing
    # postfix, as it would on a server; here that is the chroot's copy.
    r = c.run("apt-get", "install", "-y", "--no-install-recommends", "/tmp/" + deb.name)
    assert host_installed("postfix") == had_postfix  # the machine's own is untouched
    if had_postfix:
        assert re.search(r"^Remov\w+ postfix\b", r.stdout.decode(), re.M), r.stdout.decode()
        assert not c.run("dpkg-query", "-W", "-f=${Status}", "postfix",
                         check=False).stdout.decode().endswith(" installed")
    assert c.run("dpkg-query", "-W", "-f=${Status}", "smx").stdout.decode().endswith(" installed")
    # Installed disabled: deb-systemd-invoke asked and did not start it.
    assert calls_since(0) == ["systemctl is-enabled smx.service",
                              "systemctl is-active smx.service"]
    assert c.smx_pid() is None
    conffiles = c.run("dpkg-query", "-W", "-f=${Conffiles}", "smx").stdout.decode()
    assert sorted(l.split()[0] for l in conffiles.strip().splitlines()) == [
        "/etc/logrotate.d/smx", CONFIG]

    # Local submission as installed.
    assert mode_owner(c, "/usr/libexec/smx/smx-postdrop") == ("0o2755", "root", "smxdrop")
    assert c.run("dpkg-statoverride", "--list", "/usr/libexec/smx/smx-postdrop").stdout.startswith(
        b"root smxdrop 2755 ")
    assert os.readlink(c.path("/usr/bin/mailq")) == "../sbin/sendmail"
    assert os.readlink(c.path("/usr/bin/newaliases")) == "../sbin/sendmail"
    assert mode_owner(c, "/var/spool/smx") == ("0o751", "root", "smx")
    assert mode_owner(c, "/var/spool/smx/maildrop") == ("0o1730", "smxs", "smxdrop")
    assert "License: Apache-2.0" in c.read("/usr/share/doc/smx/copyright")
    # The manual points at the documentation as installed.
    page = c.run("zcat", "/usr/share/man/man5/smx.toml.5.gz").stdout.decode()
    page = page.replace("\\&", "")  # roff's zero-width escapes
    assert "/usr/share/doc/smx/config.md" in page
    for p in re.findall(r"/usr/share/doc/smx/[\w.]+\.md", page):
        assert os.path.exists(c.path(p)), p

    # The administrator's edit: a free loopback port and the sink as smart host.
    port = free_port()
    text = c.read(CONFIG)
    text, n1 = re.subn(r'^listen = \["127.0.0.1:2525"\]', 'listen = ["127.0.0.1:%d"]' % port,
                       text, flags=re.M)
    text, n2 = re.subn(r'^#default = .*$', 'default = "[127.0.0.1]:%d"' % sink.port, text,
                       flags=re.M)
    assert (n1, n2) == (1, 1)
    with open(c.path(CONFIG), "w") as f:
        f.write(text)
    r = c.run("smx", "check-config").stdout.decode()
    assert r.startswith("config OK (/etc/smx/smx.toml)\n"), r
    assert "spool:  /var/spool/smx " in r and "run:    /run/smx\n" in r

    # cron's mail before the service ever ran: it waits in the maildrop.
    r = c.run("/usr/sbin/sendmail", "-FCronDaemon", "-i", "-B8BITMIME", "-oem", "root",
              user="nobody:nogroup", input=b"Subject: cron\n\nbefore the first start\n")
    assert r.stderr == b"", r
    assert len(os.listdir(c.path("/var/spool/smx/maildrop"))) == 1

    # Enabled and started, as systemctl enable --now would.
    wants = c.path("/etc/systemd/system/multi-user.target.wants/smx.service")
    os.makedirs(os.path.dirname(wants), exist_ok=True)
    os.symlink("/lib/systemd/system/smx.service", wants)
    c.run("systemctl", "start", "smx.service")
    wait_until(lambda: serving(port), 60, "smx to answer")
    pid1 = c.smx_pid()
    wait_until(lambda: sink.count() == 1, 30, "cron's mail")
    # "root" qualified with server.hostname, the system's host name here.
    assert sink.messages()[0]["rcpts"] == ["root@" + socket.gethostname()]
    users = wait_until(lambda: len(children_users(c, pid1)) == 4 and children_users(c, pid1), 20,
                       "four children")
    assert users == {"smx-qmgr": "smxq", "smx-smtps": "smxs", "smx-smtpc": "smxc",
                     "smx-pickup": "smxs"}
    assert c.run("mailq").stdout.startswith(b"-Queue ID- ")

    # Upgrade to the next version: restarted once, in postinst (the new
    # files in place: the new smx run's program is not a deleted one), not
    # stopped before; mail goes on.
    m = mark()
    c.run("dpkg", "-i", "/tmp/" + next_deb.name)
    assert calls_since(m) == ["systemctl is-enabled smx.service",
                              "systemctl is-active smx.service",
                              "systemctl restart smx.service"]
    pid2 = c.smx_pid()
    assert pid2 not in (None, pid1)
    assert not os.path.exists("/proc/%d" % pid1)
    wait_until(lambda: serving(port), 60, "smx to answer after the upgrade")
    assert not os.readlink("/proc/%d/exe" % pid2).endswith("(deleted)")
    assert c.run("dpkg-query", "-W", "-f=${Version}", "smx").stdout.decode() == NEXT_VERSION
    c.run("sendmail", "-t", user="nobody:nogroup",
          input=b"To: after@example.net\nSubject: upgraded\n\nx\n")
    wait_until(lambda: sink.count() == 2, 30, "mail after the upgrade")
    assert sorted(m["rcpts"] for m in sink.messages())[0] == ["after@example.net"]

    # Disabled but running (started by hand): an upgrade (here the same
    # version again) restarts it too; disabled and stopped, it stays stopped.
    os.unlink(wants)
    m = mark()
    c.run("dpkg", "-i", "/tmp/" + next_deb.name)
    assert calls_since(m)[-1] == "systemctl restart smx.service", calls_since(m)
    assert c.smx_pid() not in (None, pid2)
    wait_until(lambda: serving(port), 60, "smx to answer after the second upgrade")
    c.run("systemctl", "stop", "smx.service")
    assert c.smx_pid() is None
    m = mark()
    c.run("dpkg", "-i", "/tmp/" + next_deb.name)
    assert "systemctl restart smx.service" not in calls_since(m)
    assert c.smx_pid() is None and not serving(port)

    # Remove: a running service is stopped, not left without its programs.
    os.symlink("/lib/systemd/system/smx.service", wants)
    c.run("systemctl", "start", "smx.service")
    pid3 = wait_until(lambda: c.smx_pid(), 30, "smx run")
    wait_until(lambda: serving(port), 60, "smx to answer")
    m = mark()
    c.run("apt-get", "remove", "-y", "smx")
    assert calls_since(m) == ["systemctl stop smx.service"]
    assert not os.path.exists("/proc/%d" % pid3)
    assert not serving(port)
    assert not os.path.lexists(c.path("/usr/sbin/sendmail"))
    assert os.path.exists(c.path(CONFIG))  # a conffile, until purge
    c.run("dpkg", "--purge", "smx")
    for p in RUNTIME_PATHS + ["/etc/logrotate.d/smx"]:
        assert not os.path.lexists(c.path(p)), p
    assert c.run("dpkg-statoverride", "--list", "/usr/libexec/smx/smx-postdrop",
                 check=False).stdout == b""
    # The accounts and groups stay (Debian practice; debian/postrm says why).
    assert "smxdrop:" in c.read("/etc/group") and "smxq:" in c.read("/etc/passwd")
