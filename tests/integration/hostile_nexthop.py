#!/usr/bin/env python3
"""A next hop that breaks the SMTP rules on purpose, for the integration tests.

The first --bad N connections misbehave as --mode says; later ones behave
like a plain sink, so a test can show that mail refused or broken on the bad
connection is delivered on a later one. Every message really received (the
end of data seen) is written to DIR/<n>.msg: one JSON envelope line, then the
data. Prints its port on stdout.

modes:
  data-2xx     answer DATA with 250 (and never take the body as a body)
  extra-line   send an unsolicited reply line after the end-of-data 250
  big-550      answer each RCPT with a 99-line 550 of 4 KB lines (but take
               mail for @client.test, the senders of the tests)
  drip         answer each RCPT with endless "250-" lines, one a second
  rcpt-354     answer RCPT with 354
  slow         answer every command after --delay seconds
  long-250     answer the end of data with a 250 of --lines lines
  long-ehlo    answer EHLO with --lines lines
  long-rcpt    answer each RCPT with a 250 of --lines lines
"""
import argparse
import asyncio
import json
import os
import re
import sys


def long_reply(code, lines, last):
    """A reply of `lines` lines: numbered continuation lines, then `last`."""
    return b"".join(b"%d-line %d of a long reply\r\n" % (code, i) for i in range(lines - 1)) + \
        b"%d %s\r\n" % (code, last)


class Server:
    def __init__(self, args):
        self.args = args
        self.connections = 0
        self.count = 0

    def save(self, sender, rcpts, data):
        self.count += 1
        path = os.path.join(self.args.dir, "%d.msg" % self.count)
        with open(path + ".tmp", "wb") as f:
            f.write(json.dumps({"from": sender, "rcpts": rcpts}).encode() + b"\n" + data)
        os.rename(path + ".tmp", path)

    async def session(self, reader, writer):
        self.connections += 1
        bad = self.connections <= self.args.bad
        mode = self.args.mode if bad else "good"

        async def send(text):
            if mode == "slow":
                await asyncio.sleep(self.args.delay)
            writer.write(text)
            await writer.drain()

        try:
            await send(b"220 hostile.test ESMTP\r\n")
            sender, rcpts = "", []
            while True:
                line = await asyncio.wait_for(reader.readline(), 120)
                if not line:
                    return
                verb = line[:4].upper()
                if verb == b"EHLO" and mode == "long-ehlo":
                    await send(b"250-hostile.test\r\n250-PIPELINING\r\n250-8BITMIME\r\n" +
                               long_reply(250, self.args.lines - 3, b"SIZE 104857600"))
                elif verb == b"EHLO":
                    await send(b"250-hostile.test\r\n250-PIPELINING\r\n250-8BITMIME\r\n"
                               b"250 SIZE 104857600\r\n")
                elif verb == b"HELO":
                    await send(b"250 hostile.test\r\n")
                elif verb == b"MAIL":
                    m = re.match(rb"(?i)MAIL FROM:<([^>]*)>", line)
                    sender, rcpts = (m.group(1).decode() if m else ""), []
                    await send(b"250 2.1.0 Ok\r\n")
                elif verb == b"RCPT":
                    m = re.match(rb"(?i)RCPT TO:<([^>]*)>", line)
                    addr = m.group(1).decode() if m else ""
                    if mode == "big-550" and not addr.endswith("@client.test"):
                        text = b"x" * 4000
                        await send(b"".join(b"550-5.1.1 " + text + b"\r\n" for _ in range(98)) +
                                   b"550 5.1.1 <" + addr.encode() + b"> no such user\r\n")
                    elif mode == "drip":
                        for _ in range(600):
                            await send(b"250-still thinking\r\n")
                            await asyncio.sleep(1)
                        return
                    elif mode == "rcpt-354":
                        await send(b"354 go ahead\r\n")
                    elif mode == "long-rcpt":
                        rcpts.append(addr)
                        await send(long_reply(250, self.args.lines, b"2.1.5 Ok"))
                    else:
                        rcpts.append(addr)
                        await send(b"250 2.1.5 Ok\r\n")
                elif verb == b"DATA":
                    if mode == "data-2xx":
                        await send(b"250 2.0.0 Ok: taken without the body\r\n")
                        continue  # the body lines now arrive as "commands"
                    if not rcpts:
                        await send(b"554 5.5.1 Error: no valid recipients\r\n")
                        continue
                    await send(b"354 End data with <CR><LF>.<CR><LF>\r\n")
                    data = b""
                    while True:
                        chunk = await asyncio.wait_for(reader.readline(), 120)
                        if not chunk:
                            return
                        if chunk == b".\r\n":
                            break
                        data += chunk[1:] if chunk.startswith(b".") else chunk
                    self.save(sender, rcpts, data)
                    if mode == "extra-line":
                        await send(b"250 2.0.0 Ok: queued\r\n250 2.0.0 and one more for you\r\n")
                    elif mode == "long-250":
                        await send(long_reply(250, self.args.lines, b"2.0.0 Ok: queued"))
                    else:
                        await send(b"250 2.0.0 Ok: queued\r\n")
                elif verb == b"RSET":
                    await send(b"250 2.0.0 Ok\r\n")
                elif verb == b"QUIT":
                    await send(b"221 2.0.0 Bye\r\n")
                    return
                else:
                    await send(b"500 5.5.2 what?\r\n")
        except (asyncio.TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--mode", required=True)
    p.add_argument("--bad", type=int, default=1, help="connections that misbehave")
    p.add_argument("--delay", type=float, default=0)
    p.add_argument("--lines", type=int, default=101, help="lines of a long-* reply")
    args = p.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    srv = Server(args)
    server = await asyncio.start_server(srv.session, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
