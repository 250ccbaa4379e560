"""The slow-disk lab: perf/flushdelay.c (libsmx-flushdelay.so) preloaded
into every system under test, all sharing one emulated device whose flushes
last `delay_ms` each. This side makes the shared file and reads its counters."""
import os
import shutil
import struct
import tempfile

SHM_SIZE = 4096  # >= the shim's struct shared, zero-filled


def library(build):
    return os.path.join(build, "perf", "libsmx-flushdelay.so")


class FlushLab:
    """One emulated device: a private directory under /dev/shm holding the
    shared file, mode 0666 so that processes of any user (postfix's
    children run as postfix) can wait on it."""

    def __init__(self, build, delay_ms):
        self.lib = library(build)
        if not os.access(self.lib, os.R_OK):
            raise RuntimeError("%s is not built (ninja -C %s perf/libsmx-flushdelay.so)" % (self.lib, build))
        self.delay_ms = delay_ms
        self.dir = tempfile.mkdtemp(prefix="smx-flushlab-", dir="/dev/shm")
        os.chmod(self.dir, 0o711)  # others may open the file by name, not list the directory
        self.path = os.path.join(self.dir, "device")
        with open(self.path, "wb") as f:
            f.write(b"\0" * SHM_SIZE)
        os.chmod(self.path, 0o666)

    def env(self):
        """The variables every process of a system under test needs."""
        if not self.delay_ms:
            return {}
        pre = os.environ.get("LD_PRELOAD")
        return {"LD_PRELOAD": self.lib + (" " + pre if pre else ""),
                "SMX_FLUSH_DELAY_MS": str(self.delay_ms), "SMX_FLUSH_SHM": self.path}

    def counters(self):
        """{"flushes": emulated flushes started, "calls": sync calls that waited}."""
        with open(self.path, "rb") as f:
            flushes, calls = struct.unpack("<QQ", f.read(16))
        return {"flushes": flushes, "calls": calls}

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)
