"""`smx map build|query|dump` (postmap for smx's lookup tables), newaliases,
and check-config / smx run refusing a table that is missing or corrupt
(issue 28, docs/tables.md)."""
import os
import shutil
import subprocess

import pytest

from conftest import BUILD, SANITIZED, SMX
from test_config import good_config, refused_by_both

SENDMAIL = os.path.join(BUILD, "sendmail", "sendmail")


def smx(*args, input=None):
    return subprocess.run([SMX, *args], capture_output=True, text=True, timeout=120, input=input)


def test_build_query_dump_and_exit_statuses(tmp_path):
    src = tmp_path / "access"
    src.write_text("# senders\nUser@Example.com OK\nlist a,\n  b\n10.0.0 REJECT go away\n")
    src.chmod(0o640)
    r = smx("map", "build", str(src))
    assert (r.returncode, r.stdout, r.stderr) == (0, "%s.db: 3 entries\n" % src, "")
    assert oct((tmp_path / "access.db").stat().st_mode & 0o7777) == "0o640"
    assert sorted(os.listdir(tmp_path)) == ["access", "access.db"]  # no temporary file left

    r = smx("map", "query", str(src), "user@EXAMPLE.com")
    assert (r.returncode, r.stdout) == (0, "OK\n")
    r = smx("map", "query", "hash:%s" % src, "list")
    assert (r.returncode, r.stdout) == (0, "a, b\n")
    r = smx("map", "query", str(src), "nobody@example.com")
    assert (r.returncode, r.stdout, r.stderr) == (1, "", "")
    r = smx("map", "query", str(src), "-", input="list\nnone\n10.0.0\n")
    assert (r.returncode, r.stdout) == (0, "list\ta, b\n10.0.0\tREJECT go away\n")
    r = smx("map", "query", str(src), "-", input="none\n")
    assert (r.returncode, r.stdout) == (1, "")
    r = smx("map", "dump", str(src))
    assert r.returncode == 0
    assert sorted(r.stdout.splitlines()) == ["10.0.0\tREJECT go away", "list\ta, b",
                                             "user@example.com\tOK"]
    # texthash: and inline: are read as they are.
    assert smx("map", "query", "texthash:%s" % src, "list").stdout == "a, b\n"
    assert smx("map", "query", "inline:{ a=1, b=2 }", "B").stdout == "2\n"

    # btree, by -t or by name.
    assert smx("map", "build", "-t", "btree", str(src)).returncode == 0
    r = smx("map", "query", "btree:%s" % src, "list")
    assert (r.returncode, r.stdout) == (0, "a, b\n")
    r = smx("map", "query", str(src), "list")  # hash: by default: not a hash file now
    assert r.returncode == 2 and "as a hash file" in r.stderr


def test_errors_and_usage(tmp_path):
    r = smx("map", "query", str(tmp_path / "missing"), "k")
    assert r.returncode == 2
    assert r.stderr == "smx map: hash:%s: cannot open %s.db: No such file or directory\n" % (
        tmp_path / "missing", tmp_path / "missing")
    (tmp_path / "junk.db").write_bytes(b"j" * 8192)
    r = smx("map", "dump", str(tmp_path / "junk"))
    assert r.returncode == 2 and "as a hash file" in r.stderr
    for args, what in [((), "map needs build, query or dump"),
                       (("frob",), "'frob' is not build, query or dump"),
                       (("query", "x"), "map query takes FILE KEY|-"),
                       (("build", "-t", "cdb", "x"), "-t takes hash or btree, not 'cdb'"),
                       (("dump", "-a", "x"), "-a goes with build only")]:
        r = smx("map", *args)
        assert r.returncode == 64 and what in r.stderr, (args, r.stderr)
    r = smx("help", "map")
    assert r.returncode == 0 and "smx map build [-t hash|btree] [-a] FILE..." in r.stdout
    assert "map build|query|dump" in smx("--help").stdout


def test_duplicates_and_bad_input_name_their_lines(tmp_path):
    src = tmp_path / "t"
    src.write_text("a 1\nb 2\nA 3\n")
    r = smx("map", "build", str(src))
    assert r.returncode == 0
    assert r.stdout == "%s.db: 2 entries, 1 duplicate ignored\n" % src
    assert r.stderr == ('smx map: warning: %s, line 3: duplicate entry "a" (first at line 1); '
                        'ignored\n' % src)
    assert smx("map", "query", str(src), "a").stdout == "1\n"
    before = (tmp_path / "t.db").read_bytes()
    for text, line, what in [("a 1\nlonely\n", 2, 'found no value for "lonely"'),
                             ("a 1\nb\x01c 2\n", 2, "control character"),
                             ("a 1\n\0 2\n", 2, "a NUL byte"),
                             ("  x y\n", 1, "a continuation line with no line to continue"),
                             ("a 1\nb " + "x" * 70000 + "\n", 2, "a line longer than 65536 bytes"),
                             ("a 1\n" + "x" * 300000, 2, "a line longer than 65536 bytes")]:
        src.write_bytes(text.encode())
        r = smx("map", "build", str(src))
        assert r.returncode == 2, text[:20]
        assert r.stderr.startswith("smx map: %s, line %d: " % (src, line)), r.stderr[:200]
        assert what in r.stderr
        assert (tmp_path / "t.db").read_bytes() == before  # the old table stands
    assert sorted(os.listdir(tmp_path)) == ["t", "t.db"]
    # A source that is a symbolic link, or not a regular file.
    (tmp_path / "good").write_text("k v\n")
    os.symlink(tmp_path / "good", tmp_path / "link")
    r = smx("map", "build", str(tmp_path / "link"))
    assert r.returncode == 2 and "it is a symbolic link" in r.stderr
    os.mkfifo(tmp_path / "fifo")
    r = smx("map", "build", str(tmp_path / "fifo"))
    assert r.returncode == 2 and "is not a regular file" in r.stderr
    # aliases syntax: a line without its colon.
    src.write_text("postmaster root\n")
    r = smx("map", "build", "-a", str(src))
    assert r.returncode == 2 and "line 1" in r.stderr and "name: address" in r.stderr


def test_a_100k_entry_build_in_bounded_memory(tmp_path):
    src = tmp_path / "big"
    with open(src, "w") as f:
        for i in range(100000):
            f.write("user%06d@example.com relay:[10.0.%d.%d]\n" % (i, i // 256 % 256, i % 256))
    r = smx("map", "build", str(src))
    assert (r.returncode, r.stdout) == (0, "%s.db: 100000 entries\n" % src), r.stderr
    r = smx("map", "query", str(src), "-", input="user000000@example.com\nuser099999@example.com\n"
                                                   "user100000@example.com\n")
    assert r.stdout == ("user000000@example.com\trelay:[10.0.0.0]\n"
                        "user099999@example.com\trelay:[10.0.134.159]\n")
    assert len(smx("map", "dump", str(src)).stdout.splitlines()) == 100000


def test_build_memory_is_bounded(tmp_path):
    """The source is read a buffer at a time and Berkeley DB writes through
    a fixed cache: a 300,000-entry build stays under 150 MB of RSS (it takes
    about 50: docs/tables.md)."""
    src = tmp_path / "big"
    with open(src, "w") as f:
        for i in range(300000):
            f.write("user%07d@example.com OK\n" % i)
    p = subprocess.Popen([SMX, "map", "build", str(src)], stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    # AddressSanitizer's shadow memory and redzones about double it.
    assert usage.ru_maxrss < (300 if SANITIZED else 150) * 1024, usage.ru_maxrss  # KiB


@pytest.mark.skipif(not shutil.which("postmap"), reason="postfix's postmap is not installed")
def test_postmap_reads_what_smx_map_builds_and_smx_what_postmap_builds(tmp_path):
    conf = tmp_path / "postfix"
    conf.mkdir()
    (conf / "main.cf").write_text("")
    ours = tmp_path / "ours"
    ours.write_text("Key1 value one\n")
    assert smx("map", "build", str(ours)).returncode == 0
    r = subprocess.run(["postmap", "-c", str(conf), "-q", "key1", "hash:%s" % ours],
                       capture_output=True, text=True)
    assert (r.returncode, r.stdout) == (0, "value one\n"), r.stderr
    theirs = tmp_path / "theirs"
    theirs.write_text("Key2 value two\n")
    subprocess.run(["postmap", "-c", str(conf), "hash:%s" % theirs], check=True)
    assert smx("map", "query", str(theirs), "KEY2").stdout == "value two\n"


def test_newaliases_builds_the_alias_maps(tmp_path):
    aliases = tmp_path / "aliases"
    aliases.write_text("# local aliases\npostmaster: root\nRoot: admin@example.com,\n"
                       "\tother@example.com\nroot: again@example.com\n")
    conf = tmp_path / "smx.toml"
    conf.write_text(good_config(tmp_path) + '[rewrite]\nalias_maps = ["hash:%s", "inline:{a=b}"]\n'
                    % aliases)
    newaliases = tmp_path / "newaliases"
    os.symlink(SENDMAIL, newaliases)
    r = subprocess.run([str(newaliases), "-C", str(conf)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ('newaliases: warning: %s, line 5: duplicate entry "root" (first at line 3); '
                        'ignored\nnewaliases: %s.db: 2 aliases\n' % (aliases, aliases))
    r = smx("map", "query", str(aliases), "root")
    assert r.stdout == "admin@example.com, other@example.com\n"
    # Now the config's tables all open.
    assert smx("check-config", "-c", str(conf)).returncode == 0
    # A bad line: EX_DATAERR, the table left as it was.
    aliases.write_text("postmaster root\n")
    r = subprocess.run([str(newaliases), "-C", str(conf)], capture_output=True, text=True)
    assert r.returncode == 65 and "%s, line 1" % aliases in r.stderr
    assert smx("map", "query", str(aliases), "postmaster").stdout == "root\n"
    # No alias_maps: nothing to rebuild, said so.
    conf.write_text(good_config(tmp_path))
    r = subprocess.run([SENDMAIL, "-bi", "-C", str(conf)], capture_output=True, text=True)
    assert r.returncode == 0 and "no alias table to rebuild" in r.stderr


def test_check_config_and_run_refuse_a_missing_or_corrupt_table(tmp_path):
    table = tmp_path / "aliases"
    conf = tmp_path / "smx.toml"
    conf.write_text(good_config(tmp_path) + '[rewrite]\nalias_maps = ["hash:%s"]\n' % table)
    refused_by_both(conf, "rewrite.alias_maps: hash:%s: cannot open %s.db: No such file or "
                          "directory (build it with: smx map build hash:%s)" % (table, table, table))
    assert not (tmp_path / "spool").exists()
    (tmp_path / "aliases.db").write_bytes(b"\0" * 4096)
    r = smx("check-config", "-c", str(conf))
    assert r.returncode == 2
    assert r.stderr.startswith("smx: config error: rewrite.alias_maps: hash:%s: cannot open %s.db "
                               "as a hash file: " % (table, table)), r.stderr
    # A name that is no table is an error when the file is loaded.
    conf.write_text(good_config(tmp_path) + '[rewrite]\nalias_maps = ["hash:relative"]\n')
    refused_by_both(conf, "rewrite.alias_maps: hash:relative: the file name must be an absolute path")


def test_reload_refuses_a_missing_table_and_keeps_the_running_config(sink, make_relay, tmp_path):
    relay = make_relay(sink.port)
    table = tmp_path / "aliases"
    with open(relay.config, "w") as f:
        f.write(relay.config_text(sink.port, '[rewrite]\nalias_maps = ["hash:%s"]\n' % table))
    r = relay.smx("reload", check=False)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert ("rewrite.alias_maps: hash:%s: cannot open %s.db: No such file or directory"
            % (table, table)) in r.stderr
    assert "keeping the running configuration" in r.stderr
    # Built, the same file reloads.
    table.write_text("postmaster: root\n")
    assert smx("map", "build", "-a", str(table)).returncode == 0
    r = relay.smx("reload")
    assert r.returncode == 0, (r.stdout, r.stderr)
