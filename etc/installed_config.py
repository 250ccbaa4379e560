#!/usr/bin/env python3
"""The installed smx.toml (etc/meson.build).

  installed_config.py generate EXAMPLE OUT SPOOL_DIR RUN_DIR
      the example config with spool_dir and run_dir set to the given paths
  installed_config.py install BUILT DEST
      at install time (meson sets DESTDIR): copies BUILT to DESTDIR/DEST
      unless that exists already
"""
import os
import re
import shutil
import sys


def generate(example, out, spool, run):
    with open(example) as f:
        text = f.read()
    for key, value in (("spool_dir", spool), ("run_dir", run)):
        text, n = re.subn(r'^%s = "[^"]*"' % key, '%s = "%s"' % (key, value), text,
                          flags=re.M)
        if n != 1:
            sys.exit("%s: expected one '%s = \"...\"' line, found %d" % (example, key, n))
    text = text.replace("# Relative paths are relative to the directory `smx run` is started in.\n",
                        "# Installed by smx; the unit runs: smx run -c /etc/smx/smx.toml\n")
    with open(out, "w") as f:
        f.write(text)


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
    if len(sys.argv) == 6 and sys.argv[1] == "generate":
        generate(*sys.argv[2:])
    elif len(sys.argv) == 4 and sys.argv[1] == "install":
        install(*sys.argv[2:])
    else:
        sys.exit(__doc__)
