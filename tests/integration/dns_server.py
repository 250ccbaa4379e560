"""A scripted authoritative DNS server on UDP 127.0.0.1 for the integration
tests, standard library only: it answers each name as its zone says, including
failures no real server gives on demand (SERVFAIL, REFUSED).

    zone = {
        "example.test": {"MX": [(10, "mx1.example.test"), (20, "mx2.example.test")]},
        "mx1.example.test": "SERVFAIL",        # every type, every time
        "mx2.example.test": {"A": ["127.0.0.2"]},
        "2.0.0.127.in-addr.arpa": {"PTR": ["mx2.example.test"]},
        "slow.example.test": "DROP",           # never answered (a timeout)
        "spf.test": {"TXT": ["v=spf1 ip4:127.0.0.1 -all"]},
    }
    with DnsServer(zone) as dns:               # dns.port, dns.queries
        ...

A name that is not in the zone is NXDOMAIN; a name in it without records of
the type asked is NODATA (NOERROR, no answer). Names compare without case.
Every record has TTL seconds to live.
"""
import socket
import struct
import threading

RCODES = {"NOERROR": 0, "SERVFAIL": 2, "NXDOMAIN": 3, "REFUSED": 5}
TYPES = {"A": 1, "PTR": 12, "MX": 15, "TXT": 16, "AAAA": 28}
TTL = 60


def encode_name(name):
    labels = [l for l in name.rstrip(".").split(".") if l]
    return b"".join(bytes([len(l)]) + l.encode() for l in labels) + b"\0"


def rdata(rtype, value):
    if rtype == "A":
        return socket.inet_pton(socket.AF_INET, value)
    if rtype == "AAAA":
        return socket.inet_pton(socket.AF_INET6, value)
    if rtype == "PTR":
        return encode_name(value)
    if rtype == "TXT":  # one string of at most 255 octets (SPF records, DKIM keys)
        value = value.encode()
        return bytes([len(value)]) + value
    if rtype == "MX":
        pref, host = value
        return struct.pack(">H", pref) + encode_name(host)
    raise ValueError("record type %r is not supported" % rtype)


def parse_question(query):
    """(question section bytes, name, qtype) of a query, or None if it is not one."""
    if len(query) < 12 or query[2] & 0x80 or struct.unpack(">H", query[4:6])[0] != 1:
        return None
    off, labels = 12, []
    while off < len(query) and query[off] != 0:
        n = query[off]
        if n & 0xC0 or off + 1 + n > len(query):
            return None
        labels.append(query[off + 1:off + 1 + n].decode("ascii", "replace"))
        off += 1 + n
    if off + 5 > len(query):
        return None
    qtype = struct.unpack(">H", query[off + 1:off + 3])[0]
    return query[12:off + 5], ".".join(labels).lower(), qtype


class DnsServer:
    def __init__(self, zone):
        self.zone = {name.lower(): v for name, v in zone.items()}
        self.queries = []  # (name, type number) in the order they came
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.stopping = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def answer(self, query):
        """The response to one query, or None to drop it."""
        q = parse_question(query)
        if q is None:
            return None
        question, name, qtype = q
        self.queries.append((name, qtype))
        entry = self.zone.get(name)
        answers = []
        if entry == "DROP":
            return None
        if entry is None:
            rcode = RCODES["NXDOMAIN"]
        elif isinstance(entry, str):
            rcode = RCODES[entry]
        else:
            rcode = 0
            for rtype, values in entry.items():
                if TYPES[rtype] == qtype:
                    # The owner is the question's name: a pointer to offset 12.
                    answers += [b"\xC0\x0C" + struct.pack(">HHIH", qtype, 1, TTL, len(d)) + d
                                for d in (rdata(rtype, v) for v in values)]
        # QR, AA, the query's RD, RA; one question, the answers, nothing else.
        flags = 0x8480 | (query[2] & 0x01) << 8 | rcode
        return (query[:2] + struct.pack(">HHHHH", flags, 1, len(answers), 0, 0) + question +
                b"".join(answers))

    def _serve(self):
        while not self.stopping:
            try:
                query, peer = self.sock.recvfrom(4096)
            except socket.timeout:
                continue
            except OSError:
                return
            resp = self.answer(query)
            if resp is not None:
                self.sock.sendto(resp, peer)

    def stop(self):
        self.stopping = True
        self.thread.join(5)
        self.sock.close()
