#!/usr/bin/env python3
"""Runs every test registered with meson in BUILD as a Catch2 binary with a
JUnit report in OUTDIR, so each test case counts on its own. Test cases
tagged [root] (they mount a file system) run only as root; otherwise they are
reported as skipped, with the reason."""
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET


def readable(path):
    try:
        ET.parse(path)
        return True
    except (OSError, ET.ParseError):
        return False


build, outdir = sys.argv[1], os.path.abspath(sys.argv[2])
os.makedirs(outdir, exist_ok=True)
tests = json.loads(subprocess.check_output(["meson", "introspect", "--tests", build]))
root = os.geteuid() == 0


def root_only_cases(cmd):
    r = subprocess.run(cmd + ["--list-test-names-only", "[root]"], capture_output=True, text=True)
    return [line.strip() for line in r.stdout.splitlines() if line.strip()]


def report_skipped(path, suite, names):
    tree = ET.parse(path)
    parent = tree.getroot().find("testsuite")
    if parent is None:
        parent = ET.SubElement(tree.getroot(), "testsuite", name=suite)
    for name in names:
        case = ET.SubElement(parent, "testcase", classname=suite, name=name)
        ET.SubElement(case, "skipped", message="needs root: it mounts a file system")
    tree.write(path)


for t in tests:
    out = os.path.join(outdir, t["name"] + ".xml")
    cmd = t["cmd"] + ["-r", "junit", "-o", out]
    skipped = [] if root else root_only_cases(t["cmd"])
    if skipped:
        cmd.append("~[root]")
    try:
        r = subprocess.run(cmd, timeout=t.get("timeout") or 300, cwd=t.get("workdir") or build)
        status = "ok" if r.returncode == 0 else "FAILED (exit %d)" % r.returncode
    except subprocess.TimeoutExpired:
        status = "TIMED OUT"
    print("  %-20s %s%s" % (t["name"], status,
                            ", %d skipped (need root)" % len(skipped) if skipped else ""), flush=True)
    if status != "ok" and not readable(out):
        # Crashed or was killed before it finished its report (Catch2 writes
        # it at the end): count it as one failure, named by what happened.
        with open(out, "w") as f:
            f.write('<testsuites><testsuite name="%s"><testcase name="%s">'
                    '<failure message="%s"/></testcase></testsuite></testsuites>'
                    % (t["name"], t["name"], status))
    elif skipped:
        report_skipped(out, t["name"], skipped)
