"""A scripted milter (sendmail milter protocol 6) on raw sockets, for tests:
it answers each stage as its script says, misbehaves on request (stalls,
closes mid-stream, garbage, an oversized packet, a huge body replacement),
and records what it received so that tests can assert on it.

    m = MilterPeer(script={"rcpt": "reject", "eom": ["addheader X-A yes", "continue"]})
    ... m.socket_spec ("inet:127.0.0.1:port") in smx's config ...
    m.sessions[0].stages -> ["connect", "helo", "mail", "rcpt", ...]

A script maps a stage (connect helo mail rcpt data header eoh body eom abort
unknown) to one action or a list of them sent in order (edits before the
final reply). Actions: "continue" "accept" "reject" "tempfail" "discard"
"skip" "progress", "reply <text>" (SMFIR_REPLYCODE; "\\n" separates lines),
"quarantine <reason>", "addheader <name> <value>", "insheader <index> <name>
<value>", "chgheader <index> <name> [<value>]", "addrcpt <addr>",
"addrcpt_par <addr> <args>", "delrcpt <addr>", "chgfrom <addr> [<args>]",
"replbody <text>", "replbody_size <octets>" (that many 'x' octets in 64 KiB
packets), "stall <seconds>", "close", "garbage", "huge" (a packet header
announcing 2 GiB). A callable gets the stage's data and returns an action.
"""
import socket
import struct
import threading
import time

STAGES = {b"C": "connect", b"H": "helo", b"M": "mail", b"R": "rcpt", b"T": "data",
          b"L": "header", b"N": "eoh", b"B": "body", b"E": "eom", b"A": "abort",
          b"U": "unknown", b"Q": "quit", b"K": "quit_nc"}
NO_REPLY = {"abort", "quit", "quit_nc"}
# The SMFIP_NR_* step of a stage: with it in `protocol` the peer sends no reply.
NR_STEP = {"connect": 0x1000, "helo": 0x2000, "mail": 0x4000, "rcpt": 0x8000, "data": 0x10000,
           "unknown": 0x20000, "eoh": 0x40000, "body": 0x80000, "header": 0x80}
ALL_ACTIONS = 0x1ff


def packet(code, data=b""):
    return struct.pack(">I", len(data) + 1) + code + data


class Session:
    def __init__(self):
        self.stages = []      # stage names in order
        self.data = []        # (stage, raw data) in order
        self.macros = {}      # command letter -> {name: value} (the last sent)
        self.headers = []     # (name, value)
        self.body = b""
        self.optneg = None    # (version, actions, protocol) offered by the MTA
        self.closed = False   # the MTA closed the connection


class MilterPeer:
    def __init__(self, script=None, version=6, actions=ALL_ACTIONS, protocol=0, symlist=None,
                 host="127.0.0.1"):
        self.script = dict(script or {})
        self.version, self.actions, self.protocol = version, actions, protocol
        self.symlist = symlist or {}  # stage number -> "macro names"
        self.sessions = []
        self.lock = threading.Lock()
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((host, 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.socket_spec = "inet:%s:%d" % (host, self.port)
        self.stopped = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def stop(self):
        if self.stopped:
            return
        self.stopped = True
        # close() alone leaves the socket listening while the accept thread
        # is blocked in accept(): the next connection would still be served.
        self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self.thread.join(5)

    def stages(self, i=-1):
        with self.lock:
            return list(self.sessions[i].stages) if self.sessions else []

    def _accept(self):
        while not self.stopped:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            s = Session()
            with self.lock:
                self.sessions.append(s)
            threading.Thread(target=self._serve, args=(conn, s), daemon=True).start()

    @staticmethod
    def _read(conn, n):
        buf = b""
        while len(buf) < n:
            chunk = conn.recv(n - len(buf))
            if not chunk:
                raise EOFError
            buf += chunk
        return buf

    def _serve(self, conn, s):
        try:
            with conn:
                while True:
                    (length,) = struct.unpack(">I", self._read(conn, 4))
                    body = self._read(conn, length)
                    code, data = body[:1], body[1:]
                    if code == b"O":
                        s.optneg = struct.unpack(">III", data[:12])
                        extra = b"".join(struct.pack(">I", k) + v.encode() + b"\0"
                                         for k, v in self.symlist.items())
                        conn.sendall(packet(b"O", struct.pack(
                            ">III", self.version, self.actions, self.protocol) + extra))
                        continue
                    if code == b"D":
                        parts = data[1:].split(b"\0")
                        s.macros[data[:1].decode()] = {
                            parts[i].decode(): parts[i + 1].decode()
                            for i in range(0, len(parts) - 1, 2)}
                        continue
                    stage = STAGES.get(code, "?" + code.decode(errors="replace"))
                    with self.lock:
                        s.stages.append(stage)
                        s.data.append((stage, data))
                        if stage == "header":
                            name, value = data.split(b"\0")[:2]
                            s.headers.append((name.decode(), value.decode()))
                        elif stage == "body":
                            s.body += data
                    if stage in ("quit", "quit_nc"):
                        return
                    if stage in NO_REPLY or self.protocol & NR_STEP.get(stage, 0):
                        continue
                    if not self._answer(conn, stage, data):
                        return
        except (EOFError, OSError):
            s.closed = True

    def _answer(self, conn, stage, data):
        actions = self.script.get(stage, "continue")
        if callable(actions):
            actions = actions(data)
        if isinstance(actions, str):
            actions = [actions]
        for a in actions:
            word, _, rest = a.partition(" ")
            if word == "stall":
                time.sleep(float(rest))
                continue
            if word == "close":
                return False
            if word == "garbage":
                conn.sendall(b"\x00\x00\x00\x05Zjunk")
                continue
            if word == "huge":
                conn.sendall(struct.pack(">I", 1 << 31) + b"b")
                continue
            if word == "replbody_size":
                left = int(rest)
                while left > 0:
                    n = min(left, 65535)
                    conn.sendall(packet(b"b", b"x" * n))
                    left -= n
                continue
            conn.sendall(self._encode(word, rest))
        return True

    @staticmethod
    def _encode(word, rest):
        z = lambda t: t.encode() + b"\0"  # noqa: E731
        simple = {"continue": b"c", "accept": b"a", "reject": b"r", "tempfail": b"t",
                  "discard": b"d", "skip": b"s", "progress": b"p"}
        if word in simple:
            return packet(simple[word])
        if word == "reply":
            return packet(b"y", z(rest.replace("\\n", "\r\n")))
        if word == "quarantine":
            return packet(b"q", z(rest))
        if word == "addheader":
            name, _, value = rest.partition(" ")
            return packet(b"h", z(name) + z(value))
        if word in ("insheader", "chgheader"):
            index, _, rest = rest.partition(" ")
            name, _, value = rest.partition(" ")
            return packet(b"i" if word == "insheader" else b"m",
                          struct.pack(">I", int(index)) + z(name) + z(value))
        if word in ("addrcpt", "delrcpt"):
            return packet(b"+" if word == "addrcpt" else b"-", z(rest))
        if word in ("addrcpt_par", "chgfrom"):
            addr, _, args = rest.partition(" ")
            return packet(b"2" if word == "addrcpt_par" else b"e",
                          z(addr) + (z(args) if args else b""))
        if word == "replbody":
            return packet(b"b", rest.replace("\\n", "\r\n").encode())
        raise ValueError("milter_peer: unknown action %r" % word)
