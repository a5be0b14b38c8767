"""One-way latency and bandwidth of the pipe between the two reference stage processes (issue 6).

The emulated link of `reference generate --link` can only add delay on top of this pipe, so its
latency is the floor of every emulated link. Two spawned processes, pinned to separate cores when
there are two, ping-pong messages (`reference/microbench.py`, which `calibrate` also uses); one-way
time = round trip / 2. With --spin the receiver polls (as the stages do); without, it blocks.

    python benchmarks/reference_link.py [--count 2000] [--spin]
"""

from __future__ import annotations

import argparse

from dfvg_dse.reference.microbench import pipe_times

SIZES = (16, 64, 1024, 65536, 1 << 20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--spin", action="store_true")
    args = parser.parse_args()
    for record in pipe_times(SIZES, args.count, spin=args.spin):
        size, one_way = record["bytes"], record["seconds"]
        print(f"{size:>8} bytes: one way {one_way * 1e6:8.1f} us median"
              f"{'' if size < 65536 else f', {size / one_way / 1e9:.2f} GB/s'}")


if __name__ == "__main__":
    main()
