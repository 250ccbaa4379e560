"""`meson install` puts smx in FHS places (issue 12, item 1)."""
import json
import os
import re
import subprocess

import pytest

from conftest import BUILD

# Relative to DESTDIR, with the project's default prefix /usr.
EXPECTED = {
    "usr/sbin/smx",
    "usr/libexec/smx/smx-qmgr",
    "usr/libexec/smx/smx-smtps",
    "usr/libexec/smx/smx-smtpc",
    "usr/share/smx/smx.toml",
    "etc/smx/smx.toml",
    "etc/logrotate.d/smx",
    "usr/lib/systemd/system/smx.service",
    "usr/lib/sysusers.d/smx.conf",
    "usr/lib/tmpfiles.d/smx.conf",
    "usr/share/man/man8/smx.8",
    "usr/share/man/man8/smx-qmgr.8",
    "usr/share/man/man8/smx-smtps.8",
    "usr/share/man/man8/smx-smtpc.8",
    "usr/share/man/man5/smx.toml.5",
    # Local submission (issue 26).
    "usr/sbin/sendmail",
    "usr/bin/mailq",
    "usr/bin/newaliases",
    "usr/libexec/smx/smx-pickup",
    "usr/libexec/smx/smx-postdrop",
    "usr/share/man/man8/sendmail.8",
    "usr/share/man/man8/mailq.8",
    "usr/share/man/man8/newaliases.8",
    "usr/share/man/man8/smx-pickup.8",
    "usr/share/man/man8/smx-postdrop.8",
    # What the manual pages refer to.
    "usr/share/doc/smx/README.md",
} | {"usr/share/doc/smx/%s.md" % d for d in ("benchmarks", "config", "defedb", "design",
                                             "fuzzing", "ibdb", "mcp", "milter", "operation", "policy", "qmgr",
                                             "tables")}


def build_options():
    r = subprocess.run(["meson", "introspect", "--buildoptions", BUILD],
                       capture_output=True, text=True, check=True)
    return {o["name"]: o["value"] for o in json.loads(r.stdout)}


def install(destdir):
    r = subprocess.run(["meson", "install", "-C", BUILD, "--no-rebuild", "--destdir",
                        str(destdir)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def tree(root):
    out = set()
    for d, _, files in os.walk(root):
        out |= {os.path.relpath(os.path.join(d, f), root) for f in files}
    return out


@pytest.fixture
def destdir(tmp_path):
    if build_options()["prefix"] != "/usr":
        pytest.skip("%s is configured with prefix %s, not the default /usr "
                    "(meson setup --reconfigure -Dprefix=/usr)" % (BUILD, build_options()["prefix"]))
    return tmp_path / "root"


def test_install_puts_each_file_in_its_fhs_place(destdir):
    install(destdir)
    assert tree(destdir) == EXPECTED
    for prog in ("usr/sbin/smx", "usr/libexec/smx/smx-qmgr", "usr/sbin/sendmail",
                 "usr/libexec/smx/smx-pickup"):
        assert os.access(destdir / prog, os.X_OK), prog
    for alias in ("mailq", "newaliases"):
        assert os.readlink(destdir / "usr/bin" / alias) == "../sbin/sendmail"
    # Into a DESTDIR (a package build) the group is not set: the package
    # does it (dpkg-statoverride), a root install into / with the group too.
    assert os.stat(destdir / "usr/libexec/smx/smx-postdrop").st_mode & 0o7777 == 0o755


def test_every_path_the_manual_names_is_installed(destdir):
    """The manual pages refer to installed files only (issue 26, item 8):
    no path of the source tree, and every /usr/share path they name is
    there after the install."""
    install(destdir)
    for page in sorted((destdir / "usr/share/man").rglob("*.[0-9]")):
        text = page.read_text().replace("\\&", "")  # roff's zero-width escapes
        assert not re.search(r"(?<![/\w])(?:docs|perf|scripts|tests)/", text), page
        assert "smx.toml.example" not in text, page
        for path in re.findall(r"/usr/share/[\w/.-]*\w", text):
            assert (destdir / path.lstrip("/")).exists(), (page.name, path)


def keys(path):
    """The set and the commented-out "key = value" lines of a config file."""
    with open(path) as f:
        return sorted(l.lstrip("#") for l in f.read().splitlines()
                      if re.match(r'#?[\w"]', l) and " = " in l and not l.startswith("# "))


def test_installed_config_sets_only_the_fhs_spool_and_run_dir_besides_the_example(destdir):
    install(destdir)
    smx, conf = str(destdir / "usr/sbin/smx"), str(destdir / "etc/smx/smx.toml")
    r = subprocess.run([smx, "check-config", "-c", conf], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr
    assert "spool:  /var/spool/smx " in r.stdout
    assert "run:    /run/smx\n" in r.stdout
    # Every other key is at its default: commented out, it follows the
    # defaults of the smx that reads it.
    r = subprocess.run([smx, "config", "-n", "-c", conf], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout == 'queue.spool_dir = "/var/spool/smx"\nqueue.run_dir = "/run/smx"\n'
    # The keys are the example's, line for line but those two.
    example = keys(os.path.join(BUILD, "etc", "smx.toml.example"))
    installed = keys(conf)
    assert len(example) == len(installed) > 70
    assert sorted(set(installed) - set(example)) == \
        ['run_dir = "/run/smx"', 'spool_dir = "/var/spool/smx"']


def test_install_again_keeps_an_edited_config(destdir):
    install(destdir)
    conf = destdir / "etc/smx/smx.toml"
    edited = conf.read_text().replace("#max_errors = 10\n", "max_errors = 20\n")
    assert "\nmax_errors = 20\n" in edited
    conf.write_text(edited)
    install(destdir)
    assert conf.read_text() == edited
    # The new default beside it, to compare with.
    assert "\n#max_errors = 10\n" in (destdir / "usr/share/smx/smx.toml").read_text()
