"""One-way latency and bandwidth of the pipe between the two reference stage processes (issue 6).

The emulated link of `reference generate --link` can only add delay on top of this pipe, so its
latency is the floor of every emulated link. Two spawned processes, pinned to separate cores when
there are two, ping-pong messages; one-way time = round trip / 2. With --spin the receiver polls
(as the stages do); without, it blocks in the kernel.

    python benchmarks/reference_link.py [--count 2000] [--spin]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import time

SIZES = (16, 64, 1024, 65536, 1 << 20)


def _receive(conn, spin: bool) -> bytes:
    if spin:
        while not conn.poll(0):
            pass
    return conn.recv_bytes()


def _echo(conn, cpu, spin: bool) -> None:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    while True:
        data = _receive(conn, spin)
        if not data:
            return
        conn.send_bytes(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--spin", action="store_true")
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    context = multiprocessing.get_context("spawn")
    mine, theirs = context.Pipe()
    child = context.Process(target=_echo, args=(theirs, cpus[1] if len(cpus) > 1 else None, args.spin), daemon=True)
    child.start()
    if len(cpus) > 1:
        os.sched_setaffinity(0, {cpus[0]})
    try:
        for size in SIZES:
            payload = b"x" * size
            count = args.count if size <= 65536 else max(20, args.count // 50)
            times = []
            for _ in range(count):
                start = time.perf_counter()
                mine.send_bytes(payload)
                _receive(mine, args.spin)
                times.append((time.perf_counter() - start) / 2)
            one_way = statistics.median(times)
            print(f"{size:>8} bytes: one way {one_way * 1e6:8.1f} us median"
                  f"{'' if size < 65536 else f', {size / one_way / 1e9:.2f} GB/s'}")
    finally:
        mine.send_bytes(b"")
        child.join(timeout=5)


if __name__ == "__main__":
    main()
