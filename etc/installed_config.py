#!/usr/bin/env python3
"""Installs the smx.toml make-config wrote (etc/meson.build).

  installed_config.py install BUILT DEST
      at install time (meson sets DESTDIR): copies BUILT to DESTDIR/DEST
      unless that exists already
"""
import os
import shutil
import sys


def install(built, dest):
    destdir = os.environ.get("DESTDIR", "")
    target = os.path.join(destdir, dest.lstrip("/")) if destdir else dest
    if os.path.exists(target):
        print("Keeping %s (the new default is %s)" % (target, built), file=sys.stderr)
        return
    os.makedirs(os.path.dirname(target), exist_ok=True)
    shutil.copyfile(built, target)
    os.chmod(target, 0o644)
    print("Installing %s to %s" % (built, target))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "install":
        install(*sys.argv[2:])
    else:
        sys.exit(__doc__)
