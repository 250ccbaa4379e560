"""One smx-sink for a whole suite, armed before each run (--control)."""
import json
import queue
import subprocess
import threading

from .measure import process_cpu_seconds


class Sink:
    def __init__(self, binary, port, tls=None):
        """tls: {"cert", "key"}: the sink offers STARTTLS with them."""
        args = [binary, "--port", str(port), "--control"]
        if tls:
            args += ["--tls-cert", tls["cert"], "--tls-key", tls["key"]]
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)
        self.events = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        first = self.events.get(timeout=10)
        if first.get("event") != "listening":
            raise RuntimeError("smx-sink did not start: %r" % first)
        self.port = first["port"]

    def _read(self):
        for line in self.proc.stdout:
            try:
                self.events.put(json.loads(line))
            except ValueError:
                pass
        self.events.put({"event": "exited"})

    def _send(self, cmd):
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()

    def arm(self, rcpts):
        """The next 'expected' event comes when `rcpts` more have arrived."""
        while not self.events.empty():
            self.events.get_nowait()
        self._send("expect-rcpts %d" % rcpts)

    def wait(self, timeout):
        """The 'expected' event, or the sink's current stats after timeout."""
        try:
            while True:
                ev = self.events.get(timeout=timeout)
                if ev.get("event") in ("expected", "exited"):
                    return ev, True
        except queue.Empty:
            self._send("stats")
            try:
                return self.events.get(timeout=5), False
            except queue.Empty:
                return {}, False

    def cpu_seconds(self):
        return process_cpu_seconds(self.proc.pid)

    def close(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
