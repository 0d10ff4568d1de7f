#!/usr/bin/env python3
"""A slow link on loopback, for the benchmark rows: a TCP proxy from 127.0.0.1:LISTEN to
127.0.0.1:UPSTREAM that gives every byte the one-way delay of half the round trip and a bandwidth cap,
as a phone's link does. Each direction is one link shared by every connection (bytes queue behind each
other at the cap), then delayed; the TCP handshake itself is local, so a new connection costs no round
trip of its own (a TLS handshake still costs its round trip, as its bytes cross the link). It needs no
privileges (no tc netem). Prints the port it listens on (LISTEN 0: a free one), then serves until killed.
`--log FILE` writes a timeline: a line per connection opened and per chunk delivered, each
`MONOTONIC-SECONDS CONNECTION open|up|down BYTES` (the clock is the system's monotonic one, which every
process reads alike: time.monotonic(), CLOCK_MONOTONIC).

    Benchmarks/slowlink.py --upstream 8443 --rtt-ms 150 --rate-mbit 8 [--listen 0] [--log FILE]
"""
import argparse, asyncio, sys, time

parser = argparse.ArgumentParser()
parser.add_argument("--upstream", type=int, required=True)
parser.add_argument("--listen", type=int, default=0)
parser.add_argument("--rtt-ms", type=float, default=150)
parser.add_argument("--rate-mbit", type=float, default=8)
parser.add_argument("--log")
args = parser.parse_args()
log = open(args.log, "a", buffering=1) if args.log else None
connections = 0


def note(connection, event, size=0):
    if log:
        log.write(f"{time.monotonic():.6f} {connection} {event} {size}\n")
one_way = args.rtt_ms / 2000.0
rate = args.rate_mbit * 1e6 / 8  # bytes a second


class Link:
    """One direction: when the link is next free, so a chunk leaves after those queued before it."""

    def __init__(self):
        self.free_at = 0.0

    def schedule(self, size):
        now = time.monotonic()
        start = max(now, self.free_at)
        self.free_at = start + size / rate
        return self.free_at + one_way


down, up = Link(), Link()


async def pump(reader, writer, link, connection, direction):
    # Chunks arrive in order and leave in order: each waits for its own time, after the one before it.
    queue = asyncio.Queue()

    async def deliver():
        while True:
            item = await queue.get()
            if item is None:
                break
            due, data = item
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            writer.write(data)
            note(connection, direction, len(data))
            await writer.drain()
        try:
            writer.write_eof()
        except OSError:
            pass

    sender = asyncio.ensure_future(deliver())
    try:
        while True:
            data = await reader.read(16384)
            if not data:
                break
            queue.put_nowait((link.schedule(len(data)), data))
    except (ConnectionError, OSError):
        pass
    queue.put_nowait(None)
    try:
        await sender
    except (ConnectionError, OSError):
        pass


async def handle(client_reader, client_writer):
    global connections
    connections += 1
    connection = connections
    note(connection, "open")
    try:
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", args.upstream)
    except OSError:
        client_writer.close()
        return
    await asyncio.gather(
        pump(client_reader, upstream_writer, up, connection, "up"),
        pump(upstream_reader, client_writer, down, connection, "down"), return_exceptions=True)
    for writer in (client_writer, upstream_writer):
        writer.close()


async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", args.listen)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


try:
    asyncio.run(main())
except KeyboardInterrupt:
    sys.exit(0)
