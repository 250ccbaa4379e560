#!/usr/bin/env python3
"""smx.toml(5) in scdoc, made from docs/config.md at build time, so that the
manual and the documentation share one source and cannot drift.

  config_man.py docs/config.md smx.toml.5.scd

Each table row "| `key` | default | applied | meaning |" becomes an entry
"key = default" with its meaning indented below it (a restart key's says
so); prose and code blocks are kept as they are. A section "(for
developers)" is left out.
"""
import re
import sys

HEAD = """smx.toml(5)

# NAME

smx.toml - configuration of the smx relay MTA

# SYNOPSIS

_/etc/smx/smx.toml_

"""
TAIL = """
# FILES

_/etc/smx/smx.toml_
\tThe configuration the installed service runs with, and that every smx
\tcommand reads without -c.

_/usr/share/smx/smx.toml_
\tThe installed default, as it came: the keys to decide and the spool and
\trun directories set, every other key at its default, commented out; to
\tcompare an edited configuration with (or smx config -n).

# SEE ALSO

*smx*(8), *smx-qmgr*(8), *smx-smtps*(8), *smx-smtpc*(8)

This page is made from _/usr/share/doc/smx/config.md_.
"""


# A manual page names installed files only: the documentation as the
# package (and meson install) put it, and no file of the source tree.
INSTALLED = [
    (re.compile(r"\bdocs/(\w+)\.md\b"), r"/usr/share/doc/smx/\1.md"),
    (re.compile(r"\betc/smx\.toml\.example\b"), "/usr/share/smx/smx.toml"),
    (re.compile(r"`?\bscripts/lib/setup\.sh`?"), "the package's install (or the setup script of the smx source tree)"),
    (re.compile(r"`?\bperf/[\w./-]*\w`?"), "the benchmarks in the smx source tree"),
    (re.compile(r"`?\b(?:scripts|tests)/[\w./-]*\w`?"), "the smx source tree"),
]


def inline(md):
    """Markdown inline text to scdoc: scdoc's markup characters escaped,
    `code` spans as plain text, source paths as installed."""
    for pattern, repl in INSTALLED:
        md = pattern.sub(repl, md)
    text = md.replace("\\", "\\\\").replace("*", "\\*").replace("_", "\\_")
    return text.replace("`", "")


def cells(row):
    parts = [c.strip() for c in row.strip().strip("|").split("|")]
    if len(parts) != 4 or parts[2] not in ("reload", "restart"):
        sys.exit("config.md: a key table row needs 4 cells, the third reload or restart: %r"
                 % row)
    return parts


def convert(lines):
    out = []
    code = False
    developers = False
    for line in lines:
        if line.startswith("## "):
            developers = line.endswith("(for developers)")
        if developers:
            continue
        if line.startswith("```"):
            out.append("```")
            code = not code
        elif code:
            out.append(line)
        elif line.startswith("# "):
            out.append("# DESCRIPTION")
        elif line.startswith("## "):
            out.append("# " + inline(line[3:]))
        elif line.startswith("### "):
            # scdoc has two heading levels; a subsection is the second.
            out.append("## " + inline(line[4:]))
        elif line.startswith("| key ") or line.startswith("|---"):
            continue
        elif line.startswith("| "):
            keys, default, applied, meaning = cells(line)
            names = [k.strip().strip("`") for k in keys.split(",")]
            out.append(" ++\n".join("*%s* = %s" % (inline(k), inline(default)) for k in names))
            if applied == "restart":
                meaning += " Applied at a restart of smx run (smx reload keeps the running value)."
            out.append("\t" + inline(meaning))
            out.append("")
        else:
            text = inline(line)
            # A line starting with [, | or ] would open an scdoc table.
            out.append("\\" + text if text[:1] in "[|]" and text else text)
    if code:
        sys.exit("config.md: a code block does not end")
    return "\n".join(out).strip() + "\n"


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        body = convert(f.read().splitlines())
    with open(sys.argv[2], "w") as f:
        f.write(HEAD + body + TAIL)


if __name__ == "__main__":
    main()
