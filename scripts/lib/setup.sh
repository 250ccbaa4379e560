# Shared by scripts/run and scripts/test (source it): install the Debian
# packages smx needs when they are missing, and configure/build with Meson.
#   smx_install_packages [extra-package...]   (as root, also smx_add_users)
#   smx_add_users                                the accounts of the children
#   smx_build [build-dir] [meson option...]      (default build-dir: build)
#   smx_setup [build-dir] [meson option...]      both of the above
# A relative build dir is relative to the repository, not the caller's cwd.
# With SMX_NINJA_TARGETS set (e.g. to $SMX_RUN_TARGETS), smx_build builds
# only those targets and what they need instead of everything.

SMX_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# With ccache installed (scripts/test installs it; meson uses it by itself) a
# rebuild reuses the objects of any earlier build of the same sources, in this
# clone or another: paths are hashed relative to the repository, and the build
# directory is not hashed.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$SMX_ROOT}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
SMX_PACKAGES="meson ninja-build pkg-config g++ libboost1.81-dev libdb5.3++-dev
  libspdlog-dev catch2 libc-ares-dev libtomlplusplus-dev libssl-dev python3
  libsystemd-dev scdoc libpcre2-dev"
# What `dpkg-buildpackage -b` needs besides SMX_PACKAGES (debian/control's
# Build-Depends are those): the Debian package of README, tests/integration/test_deb.py.
SMX_DEB_PACKAGES="debhelper build-essential"
# What `smx run` needs, and local submission: the programs, none of the
# tests and tools.
SMX_RUN_TARGETS="mcp/smx qmgr/smx-qmgr smtps/smx-smtps smtpc/smx-smtpc pickup/smx-pickup
  postdrop/smx-postdrop sendmail/sendmail"

smx_install_packages() {
  local missing="" p
  for p in $SMX_PACKAGES "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" \
      || missing="$missing $p"
  done
  smx_add_users || return 1
  [ -z "$missing" ] && return 0
  local sudo=""
  if [ "$(id -u)" != 0 ]; then
    if ! command -v sudo >/dev/null; then
      echo "smx: missing packages:$missing; install them as root (apt-get install$missing)" >&2
      return 1
    fi
    sudo="sudo"
  fi
  echo "smx: installing$missing" >&2
  # postfix is only ever run as private instances by the tests and perf/:
  # its system instance stays unconfigured and is not started.
  echo "postfix postfix/main_mailer_type select No configuration" \
    | $sudo debconf-set-selections 2>/dev/null || true
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q \
    && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing
}

# Started as root, `smx run` runs SMTPS as smxs, QMGR as smxq and SMTPC as
# smxc, each with a group of its own, and all three in the group smx that
# shares the content files (docs/mcp.md); smx-postdrop is setgid smxdrop,
# the group that may write into the maildrop. Creates what is missing;
# nothing to do for another user, whose children all run as that user.
smx_add_users() {
  [ "$(id -u)" = 0 ] || return 0
  getent group smx >/dev/null || groupadd --system smx || return 1
  getent group smxdrop >/dev/null || groupadd --system smxdrop || return 1
  local u
  for u in smxs smxq smxc; do
    getent passwd "$u" >/dev/null \
      || adduser --quiet --system --group --no-create-home --home /nonexistent "$u" \
      || return 1
  done
}

smx_build() {
  local dir="${1:-build}"
  [ $# -gt 0 ] && shift
  case "$dir" in /*) ;; *) dir="$SMX_ROOT/$dir" ;; esac
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" "$SMX_ROOT" "$@" || return 1
  elif [ $# -gt 0 ]; then
    # --reconfigure, not `meson configure`: it also knows options added since.
    meson setup --reconfigure "$dir" "$SMX_ROOT" "$@" >/dev/null || return 1
  fi
  # shellcheck disable=SC2086  # a list of target names
  ninja -C "$dir" ${SMX_NINJA_TARGETS:-}
}

smx_setup() {
  smx_install_packages && smx_build "$@"
}
