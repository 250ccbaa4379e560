#!/usr/bin/env python3
"""A recording SMTP sink for the integration tests, independent of smx code.

Each accepted message is written to DIR/<n>.msg: one JSON line with the
envelope, then the message bytes exactly as received (after dot-unstuffing).
Options make it answer 4xx/5xx so the tests can drive retries and bounces.
"""
import argparse
import asyncio
import json
import os
import re
import signal
import ssl
import sys
import time


class Sink:
    def __init__(self, args):
        self.dir = args.dir
        self.count = 0
        self.tempfail_first = args.tempfail_first
        self.attempts = {}  # message key -> DATA attempts seen
        self.permfail = re.compile(args.permfail) if args.permfail else None
        self.tempfail_rcpt = re.compile(args.tempfail_rcpt) if args.tempfail_rcpt else None
        self.hold_while = args.hold_while
        self.stall = args.stall
        self.tls = None
        if args.tls:
            cert, key = args.tls.split(",")
            self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.tls.load_cert_chain(cert, key)
        self.require_tls = args.require_tls
        self.broken_tls = args.broken_tls
        self.busy = args.busy
        self.max_sessions = args.max_sessions
        self.sessions = 0  # open now
        self.smtputf8 = args.smtputf8
        self.dsn = args.dsn
        self.eightbit = not args.no_8bitmime

    async def session(self, reader, writer):
        async def reply(text):
            writer.write(text.encode() + b"\r\n")
            await writer.drain()

        self.sessions += 1
        try:
            if self.busy or (self.max_sessions and self.sessions > self.max_sessions):
                # One line per refused session: when (epoch seconds).
                with open(os.path.join(self.dir, "refused"), "a") as f:
                    f.write("%.3f\n" % time.time())
                await reply("421 4.3.2 sink.test busy, closing" if self.busy else
                            "421 4.7.0 sink.test too many connections, closing")
                return
            await reply("220 sink.test ESMTP test sink")
            sender, rcpts, tls, params, rcpt_params, resumed = None, [], None, "", [], False
            while True:
                line = await asyncio.wait_for(reader.readline(), 60)
                if not line:
                    return
                cmd = line.decode("latin-1").rstrip("\r\n")
                verb = cmd[:4].upper()
                if verb == "EHLO":
                    offer = b"250-STARTTLS\r\n" if (self.tls or self.broken_tls) and not tls \
                        else b""
                    if self.smtputf8:
                        offer += b"250-SMTPUTF8\r\n"
                    if self.dsn:
                        offer += b"250-DSN\r\n"
                    if self.eightbit:
                        offer += b"250-8BITMIME\r\n"
                    writer.write(b"250-sink.test\r\n250-PIPELINING\r\n" +
                                 offer + b"250-SIZE 104857600\r\n250 ENHANCEDSTATUSCODES\r\n")
                    await writer.drain()
                elif cmd.upper() == "STARTTLS" and self.broken_tls and not tls:
                    await reply("220 2.0.0 go ahead")
                    # Garbage as the answer to the ClientHello: sent with the
                    # 220 it would be (rightly) refused as data after the 220.
                    if not await reader.read(1):
                        return
                    writer.write(b"this is not TLS\r\n" * 4)
                    await writer.drain()
                    return
                elif cmd.upper() == "STARTTLS" and self.tls and not tls:
                    await reply("220 2.0.0 go ahead")
                    await writer.start_tls(self.tls)
                    obj = writer.get_extra_info("ssl_object")
                    tls = "%s %s" % (obj.version(), obj.cipher()[0])
                    resumed = obj.session_reused
                    sender, rcpts = None, []
                elif verb in ("MAIL", "RCPT", "DATA") and self.require_tls and not tls:
                    await reply("530 5.7.0 Must issue a STARTTLS command first")
                elif verb == "HELO":
                    await reply("250 sink.test")
                elif verb == "MAIL":
                    m = re.match(r"(?i)MAIL FROM:<([^>]*)>(.*)", cmd)
                    sender, rcpts, rcpt_params = (m.group(1) if m else ""), [], []
                    params = m.group(2).strip() if m else ""
                    await reply("250 2.1.0 Ok")
                elif verb == "RCPT":
                    m = re.match(r"(?i)RCPT TO:<([^>]*)>(.*)", cmd)
                    addr = m.group(1) if m else ""
                    if self.permfail and self.permfail.search(addr):
                        await reply("550 5.1.1 <%s>: user unknown" % addr)
                    elif self.tempfail_rcpt and self.tempfail_rcpt.search(addr):
                        await reply("451 4.2.0 <%s>: try again later" % addr)
                    elif self.hold_while and os.path.exists(self.hold_while):
                        await reply("451 4.2.0 <%s>: held, try again later" % addr)
                    else:
                        rcpts.append(addr)
                        rcpt_params.append(m.group(2).strip() if m else "")
                        await reply("250 2.1.5 Ok")
                elif verb == "DATA":
                    if not rcpts:
                        await reply("554 5.5.1 no valid recipients")
                        continue
                    await reply("354 go ahead")
                    data = bytearray()
                    while True:
                        l = await asyncio.wait_for(reader.readline(), 60)
                        if not l:
                            return
                        if l == b".\r\n":
                            break
                        if l.startswith(b"."):
                            l = l[1:]
                        data += l
                    if self.stall:
                        await asyncio.sleep(self.stall)
                    key = (sender, tuple(rcpts), bytes(data[-200:]))
                    n = self.attempts.get(key, 0) + 1
                    self.attempts[key] = n
                    if n <= self.tempfail_first:
                        await reply("451 4.3.0 attempt %d: come back later" % n)
                        continue
                    self.count += 1
                    name = os.path.join(self.dir, "%d.msg" % self.count)
                    with open(name + ".tmp", "wb") as f:
                        f.write(json.dumps({"from": sender, "rcpts": rcpts, "tls": tls,
                                            "resumed": resumed,
                                            "params": params,
                                            "rcpt_params": rcpt_params}).encode() + b"\n")
                        f.write(data)
                    os.rename(name + ".tmp", name)
                    await reply("250 2.0.0 Ok: queued as %d" % self.count)
                elif verb == "RSET":
                    sender, rcpts = None, []
                    await reply("250 2.0.0 Ok")
                elif verb == "NOOP":
                    await reply("250 2.0.0 Ok")
                elif verb == "QUIT":
                    await reply("221 2.0.0 Bye")
                    return
                else:
                    await reply("502 5.5.2 unknown command")
        except (asyncio.TimeoutError, ConnectionError, ssl.SSLError):
            return
        finally:
            self.sessions -= 1
            writer.close()


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--busy", action="store_true",
                   help="greet every client with 421 (and note the time in DIR/refused)")
    p.add_argument("--max-sessions", type=int, default=0,
                   help="greet clients beyond N concurrent sessions with 421 (and note the "
                        "time in DIR/refused)")
    p.add_argument("--dir", required=True)
    p.add_argument("--tempfail-first", type=int, default=0,
                   help="answer 451 to the first N DATA attempts of each message")
    p.add_argument("--permfail", help="regex: recipients answered 550")
    p.add_argument("--tempfail-rcpt", help="regex: recipients answered 451")
    p.add_argument("--hold-while", help="a path: while it exists, every recipient is answered 451")
    p.add_argument("--stall", type=float, default=0, help="seconds to wait before the DATA reply")
    p.add_argument("--tls", help="CERT,KEY: offer STARTTLS with this certificate")
    p.add_argument("--require-tls", action="store_true",
                   help="answer 530 to MAIL, RCPT and DATA before STARTTLS")
    p.add_argument("--broken-tls", action="store_true",
                   help="offer STARTTLS, then send garbage instead of a handshake")
    p.add_argument("--smtputf8", action="store_true", help="offer SMTPUTF8")
    p.add_argument("--dsn", action="store_true", help="offer DSN (RFC 3461)")
    p.add_argument("--no-8bitmime", action="store_true", help="do not offer 8BITMIME")
    args = p.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    sink = Sink(args)
    server = await asyncio.start_server(sink.session, args.host, args.port,
                                        backlog=1024, limit=1 << 22)
    print(server.sockets[0].getsockname()[1], flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for s in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(s, stop.set)
    async with server:
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)
