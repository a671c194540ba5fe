#!/usr/bin/env python3
"""The two sides of scripts/bench-slowloris.sh, each a process of its own so neither slows
the other's clock:

  slowloris.py hold HOST PORT N SECONDS SOURCES
      holds N slow-loris connections to HOST:PORT for SECONDS: each sends a request line
      and one header, then nothing; when the server closes one, it is opened again at once
      (as an attacker would). Connections come from the loopback addresses
      127.0.0.2 .. 127.0.0.(SOURCES+1), so N may exceed one address's ephemeral ports.
      Prints one JSON line: connections opened in all, refused connects, and the most held
      at once.

  slowloris.py measure URL COUNT
      COUNT GETs of URL one after another, each on a new connection (the worst case for a
      server that is short of connections); prints one JSON line with the latencies'
      p50, p99 and max in milliseconds and how many were not 200.
"""

import asyncio
import json
import resource
import socket
import sys
import time
import urllib.parse


def raise_open_files():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def hold(host, port, n, seconds, sources):
    raise_open_files()
    stats = {"opened": 0, "refused": 0, "held_max": 0}
    held = 0
    deadline = time.monotonic() + seconds

    async def one(i):
        nonlocal held
        source = f"127.0.0.{2 + i % sources}"
        while time.monotonic() < deadline:
            try:
                reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0))
            except OSError:
                stats["refused"] += 1
                await asyncio.sleep(0.5)
                continue
            stats["opened"] += 1
            held += 1
            stats["held_max"] = max(stats["held_max"], held)
            try:
                writer.write(b"GET /feeds/held/ HTTP/1.1\r\nHost: x\r\n")
                await writer.drain()
                left = deadline - time.monotonic()
                if left > 0:
                    await asyncio.wait_for(reader.read(1), left)
            except (OSError, asyncio.TimeoutError):
                pass
            finally:
                held -= 1
                writer.close()

    # Opened gradually (1,000 a second) rather than in one SYN flood on the backlog.
    tasks = []
    for i in range(n):
        tasks.append(asyncio.create_task(one(i)))
        if i % 100 == 99:
            await asyncio.sleep(0.1)
    await asyncio.gather(*tasks)
    print(json.dumps(stats))


def measure(url, count):
    u = urllib.parse.urlsplit(url)
    request = f"GET {u.path}?{u.query} HTTP/1.1\r\nHost: {u.netloc}\r\nConnection: close\r\n\r\n".encode()
    took, failed = [], 0
    for _ in range(count):
        started = time.perf_counter()
        try:
            with socket.create_connection((u.hostname, u.port), timeout=30) as s:
                s.sendall(request)
                answer = b""
                while chunk := s.recv(65536):
                    answer += chunk
            if not answer.startswith(b"HTTP/1.1 200"):
                failed += 1
        except OSError:
            failed += 1
        took.append((time.perf_counter() - started) * 1000)
        time.sleep(0.01)
    took.sort()
    pick = lambda q: round(took[min(len(took) - 1, int(q * len(took)))], 2)
    print(json.dumps({"requests": count, "failed": failed, "p50_ms": pick(0.5), "p99_ms": pick(0.99), "max_ms": round(took[-1], 2)}))


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "hold":
        host, port, n, seconds, sources = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])
        asyncio.run(hold(host, port, n, seconds, sources))
    elif mode == "measure":
        measure(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(f"unknown mode {mode!r}: hold or measure")
