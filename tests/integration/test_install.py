"""`meson install` puts smx in FHS places (issue 12, item 1)."""
import json
import os
import subprocess

import pytest

from conftest import BUILD, REPO

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
}


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
    for prog in ("usr/sbin/smx", "usr/libexec/smx/smx-qmgr"):
        assert os.access(destdir / prog, os.X_OK), prog


def test_installed_config_uses_the_fhs_spool_and_run_dir_and_passes_check_config(destdir):
    install(destdir)
    r = subprocess.run([str(destdir / "usr/sbin/smx"), "check-config", "-c",
                        str(destdir / "etc/smx/smx.toml")],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert "spool:  /var/spool/smx " in r.stdout
    assert "run:    /run/smx\n" in r.stdout
    # The rest is the example, key for key.
    with open(os.path.join(REPO, "etc", "smx.toml.example")) as f:
        example = f.read().splitlines()
    installed = (destdir / "etc/smx/smx.toml").read_text().splitlines()
    changed = [(a, b) for a, b in zip(example, installed) if a != b]
    assert len(example) == len(installed)
    assert [b.split("#")[0].strip() for _, b in changed if not b.startswith("#")] == \
        ['spool_dir = "/var/spool/smx"', 'run_dir = "/run/smx"']


def test_install_again_keeps_an_edited_config(destdir):
    install(destdir)
    conf = destdir / "etc/smx/smx.toml"
    edited = conf.read_text().replace("max_errors = 10 ", "max_errors = 20 ")
    assert "max_errors = 20 " in edited
    conf.write_text(edited)
    install(destdir)
    assert conf.read_text() == edited
    # The new default beside it, to compare with.
    assert "max_errors = 10 " in (destdir / "usr/share/smx/smx.toml").read_text()
