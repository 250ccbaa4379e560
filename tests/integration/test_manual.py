"""The manual pages render, and smx.toml(5) lists every key of docs/config.md
with the same default (issue 12, item 4)."""
import os
import re
import subprocess

import pytest

from conftest import BUILD, REPO

PAGES = ["smx.8", "smx-qmgr.8", "smx-smtps.8", "smx-smtpc.8", "smx-pickup.8", "smx-postdrop.8",
         "sendmail.8", "smx.toml.5"]


def render(page):
    r = subprocess.run(["man", "--warnings", "-l", os.path.join(BUILD, "man", page)],
                       capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, MANWIDTH="200", LC_ALL="C.UTF-8", MANPAGER="cat",
                                PAGER="cat"))
    assert r.returncode == 0, r.stderr
    assert r.stderr == "", r.stderr  # groff warnings: broken markup
    # groff's typographic hyphens and minus signs back to ASCII.
    return r.stdout.replace("\u2010", "-").replace("\u2212", "-")


@pytest.mark.parametrize("page", PAGES)
def test_page_renders(page):
    text = render(page)
    name, section = page.rsplit(".", 1)
    assert text.startswith("%s(%s)" % (name, section)), text[:200]
    # A page may name several commands: "sendmail, mailq, newaliases - ...".
    assert re.search(r"\nNAME\n       %s(, [\w-]+)* - " % re.escape(name), text), text[:300]
    assert "SEE ALSO" in text


def documented_keys():
    """(section, key, default) from docs/config.md's tables, read here on
    their own (not with the generator's code)."""
    keys = []
    section = None
    with open(os.path.join(REPO, "docs", "config.md")) as f:
        for line in f:
            m = re.match(r"## \[(\w+)\]", line)
            if m:
                section = m.group(1)
            m = re.match(r"\| (`[^|]+`) \| ([^|]+) \|", line)
            if m:
                default = m.group(2).strip().replace("`", "")
                for key in re.findall(r"`(\w+)`", m.group(1)):
                    keys.append((section, key, default))
    return keys


def test_smx_toml_5_lists_every_documented_key_with_its_default():
    keys = documented_keys()
    assert len(keys) >= 45
    text = render("smx.toml.5")
    # Each key's entry under its section's heading, in the order of the docs.
    pos = 0
    for section, key, default in keys:
        heading = text.find("\n[%s]" % section)
        assert heading >= 0, section
        entry = "\n       %s = %s\n" % (key, default)
        found = text.find(entry, max(pos, heading))
        assert found >= 0, "smx.toml(5) has no %r under [%s]" % (entry.strip(), section)
        pos = found


def test_smx_8_names_every_command():
    text = render("smx.8")
    usage = subprocess.run([os.path.join(BUILD, "mcp", "smx"), "--help"],
                           capture_output=True, text=True, check=True).stdout
    commands = re.findall(r"^  ([a-z-]+)", usage.split("commands:")[1].split("options:")[0],
                          flags=re.M)
    assert len(commands) >= 8
    for c in commands:
        assert re.search(r"^       %s\b" % c, text, flags=re.M), c


def test_example_config_names_every_documented_key():
    """The example config make-config writes says it shows every key: each
    documented key is there under its section (set, or commented out), and
    the file passes check-config."""
    example = os.path.join(BUILD, "etc", "smx.toml.example")
    sections = {}
    section = None
    with open(example) as f:
        for line in f:
            m = re.match(r"\[(\w+)\]", line)
            if m:
                section = m.group(1)
            m = re.match(r'#? ?"?([\w.]+)"? *=', line)
            if m and section:
                sections.setdefault(section, set()).add(m.group(1))
    for section, key, _ in documented_keys():
        if section == "routes":
            continue  # its keys are domains
        assert key in sections.get(section, ()), "%s.%s is not in smx.toml.example" % (section, key)
    r = subprocess.run([os.path.join(BUILD, "mcp", "smx"), "check-config", "-c", example],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
