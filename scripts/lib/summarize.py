#!/usr/bin/env python3
"""Counts test cases over every JUnit XML file below DIR; prints the failures
and, as the last line, "N passed, N failed". Exits 1 when anything failed or
nothing ran."""
import os
import sys
import xml.etree.ElementTree as ET

passed = failed = skipped = 0
failures = []
for d, _, files in os.walk(sys.argv[1]):
    for name in sorted(files):
        if not name.endswith(".xml"):
            continue
        path = os.path.join(d, name)
        try:
            root = ET.parse(path).getroot()
        except ET.ParseError as e:
            failed += 1
            failures.append("%s: unreadable report (%s)" % (path, e))
            continue
        for case in root.iter("testcase"):
            if case.find("skipped") is not None:
                skipped += 1
            elif case.find("failure") is not None or case.find("error") is not None:
                failed += 1
                failures.append("%s: %s %s" % (os.path.relpath(path, sys.argv[1]),
                                               case.get("classname", ""), case.get("name")))
            else:
                passed += 1
for f in failures:
    print("FAILED", f)
line = "%d passed, %d failed" % (passed, failed)
if skipped:
    line += ", %d skipped" % skipped
print(line)
sys.exit(1 if failed or passed == 0 else 0)
