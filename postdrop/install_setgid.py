"""meson install step: makes smx-postdrop setgid to the maildrop group
(server.maildrop_group, smxdrop) when installing as root into the running
system. Into a DESTDIR (a package build), or without the group, it says
what is left to do: the package does it in its postinst (dpkg-statoverride)."""
import grp
import os
import sys

path, group = sys.argv[1], sys.argv[2]
dest = os.environ.get("DESTDIR", "")
target = os.path.join(os.environ["MESON_INSTALL_DESTDIR_PREFIX"], path)
try:
    gid = grp.getgrnam(group).gr_gid
except KeyError:
    gid = None
if dest or os.geteuid() != 0 or gid is None:
    why = ("installing into DESTDIR" if dest else "not root" if os.geteuid() != 0
           else "no group %s (scripts/lib/setup.sh makes it)" % group)
    print("smx-postdrop: left without setgid (%s); local users can submit mail once it is "
          "root:%s 2755: chgrp %s %s && chmod 2755 %s" % (why, group, group, target, target))
    sys.exit(0)
os.chown(target, 0, gid)
os.chmod(target, 0o2755)
print("smx-postdrop: root:%s 2755" % group)
