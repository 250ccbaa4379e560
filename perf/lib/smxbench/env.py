"""Where things are, what must be installed, free ports, machine facts."""
import os
import platform
import shlex
import shutil
import socket
import subprocess
import sys
import time

PERF = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROOT = os.path.dirname(PERF)
# What every tool's --help says of --out.
WHERE = ("(default: a new <date>-%s directory under $SMX_PERF_RESULTS, else under "
         "$XDG_CACHE_HOME/smx-perf or ~/.cache/smx-perf: outside the checkout)")


def results_root():
    """Where runs go unless --out names a directory. Never the checkout: raw
    runs are megabytes each; their summaries go to perf/history.jsonl
    (perf/history add)."""
    if os.environ.get("SMX_PERF_RESULTS"):
        return os.path.abspath(os.environ["SMX_PERF_RESULTS"])
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "smx-perf")


def results_dir(out, suite):
    """--out as given, else a new <date>-<suite> directory under results_root()
    (not made here: a tool refuses bad options first)."""
    if out:
        return out
    path = os.path.join(results_root(), time.strftime("%Y-%m-%d-%H%M") + "-" + suite)
    if os.path.exists(path):  # two runs in one minute
        path = os.path.join(results_root(), time.strftime("%Y-%m-%d-%H%M%S") + "-" + suite)
    return path


def run_record():
    """What a run's own record says of it, for perf/history: the checkout's
    commit (with -dirty when tracked files differ from it; a build given
    with --build may be older), the command line and when it ran."""
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=7", "HEAD"], capture_output=True, text=True)
    commit = head.stdout.strip() or None
    if commit and subprocess.run(["git", "-C", ROOT, "diff", "--quiet", "HEAD"]).returncode:
        commit += "-dirty"
    return {"commit": commit, "date": time.strftime("%Y-%m-%d %H:%M"),
            "command": " ".join(["perf/" + os.path.basename(sys.argv[0])] + [shlex.quote(a) for a in sys.argv[1:]])}


def log(msg):
    """Progress goes to stderr so stdout stays free for the final table."""
    print(time.strftime("%H:%M:%S ") + msg, file=sys.stderr, flush=True)


def sh(args, **kw):
    return subprocess.run(args, check=True, **kw)


def apt_install(packages):
    """apt-get install, with postfix left unconfigured: its system instance
    must not be set up or started, we only run private instances."""
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    log("installing " + " ".join(packages))
    subprocess.run(["debconf-set-selections"], input=b"postfix postfix/main_mailer_type select No configuration\n",
                   check=False)
    if subprocess.run(["apt-get", "install", "-y", "-q"] + packages, env=env,
                      stdout=subprocess.DEVNULL).returncode != 0:
        sh(["apt-get", "update", "-q"], stdout=subprocess.DEVNULL)
        sh(["apt-get", "install", "-y", "-q"] + packages, env=env, stdout=subprocess.DEVNULL)


def ensure_packages(need_plot=True):
    # rbldnsd and dig: the DNSBL of --policy.
    missing = [p for p, probe in (("postfix", "postfix"), ("strace", "strace"), ("linux-perf", "perf"),
                                  ("rbldnsd", "rbldnsd"), ("bind9-dnsutils", "dig"))
               if not shutil.which(probe)]
    if not shutil.which("smtp-source"):
        missing.append("postfix")
    if need_plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            missing.append("python3-matplotlib")
    if missing:
        apt_install(sorted(set(missing)))


TOOLS = ["perf/smx-source", "perf/smx-sink"]
SMX = ["mcp/smx", "qmgr/smx-qmgr", "smtps/smx-smtps", "smtpc/smx-smtpc", "pickup/smx-pickup"]


def ensure_build(build):
    """Builds (or brings up to date) the tools and the programs `smx run` starts; not
    the tests, which take long on two cores. smx may fail to build while it
    is work in progress: then it is skipped, the tools must build."""
    if not os.path.isdir(build):
        log("meson setup " + build)
        sh(["meson", "setup", build, ROOT], stdout=subprocess.DEVNULL)
    log("ninja: perf tools and smx")
    if subprocess.run(["ninja", "-C", build] + TOOLS + SMX, stdout=subprocess.DEVNULL).returncode == 0:
        return
    log("smx does not build: building the perf tools only (smx will be skipped)")
    if subprocess.run(["ninja", "-C", build] + TOOLS, stdout=subprocess.DEVNULL).returncode != 0:
        if not all(os.access(os.path.join(build, t), os.X_OK) for t in TOOLS):
            raise SystemExit("relay-bench: the perf tools do not build (see ninja -C %s)" % build)
        log("ninja failed: using the perf tools already built")


def make_cert(workdir):
    """A self-signed RSA 2048 certificate and its key, made with openssl in
    workdir, for relay-bench --tls: every system and the sink use it."""
    cert, key = os.path.join(workdir, "tls-cert.pem"), os.path.join(workdir, "tls-key.pem")
    sh(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
        "/CN=relay.perf.example", "-keyout", key, "-out", cert], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.chmod(key, 0o600)
    return {"cert": cert, "key": key}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=30.0):
    """True once something accepts on 127.0.0.1:port."""
    end = time.time() + timeout
    while time.time() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            time.sleep(0.1)
    return False


def machine_facts(path):
    mem_kb = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    fs = subprocess.run(["df", "-T", path], capture_output=True, text=True).stdout.splitlines()[-1].split()
    model = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "cores": os.cpu_count(), "cpu_model": model, "memory_mb": mem_kb // 1024,
        "kernel": platform.release(), "filesystem": fs[1], "device": fs[0],
        "os": _os_release(), "loadavg_at_start": os.getloadavg(),
    }


def _os_release():
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return ""
