"""Bursty load beside a grading (a benchmark's load, not a test): the way a shared grading
machine is used — one or two busy processes for 0.2–2 s, then 0.2–2 s of nothing, at random
(another job starting, an install, a browser, a shared container host). Seeded, so a bench's
run can be made again.

    python bench/bursts.py [--seed N] [--seconds S]     # until killed, or for S seconds

`bursty_load(seed)` starts it as a process of its own (kill it when done).
"""
from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import time

BUSY_S = (0.2, 2.0)  # how long a burst lasts
IDLE_S = (0.2, 2.0)  # how long the machine is left alone after it
WORKERS = (1, 2)  # busy processes in a burst


def spin(until: float) -> None:
    """Keep a CPU busy until the monotonic time `until`."""
    while time.monotonic() < until:
        pass


def run(seed: int, seconds: float | None = None) -> None:
    """Bursts and pauses at random (seeded), for `seconds` or until killed."""
    rng = random.Random(seed)
    end = None if seconds is None else time.monotonic() + seconds
    children: list[int] = []

    def stop(*_: object) -> None:
        for child in children:
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    while end is None or time.monotonic() < end:
        until = time.monotonic() + rng.uniform(*BUSY_S)
        children = []
        for _ in range(rng.choice(WORKERS)):
            child = os.fork()
            if child == 0:
                spin(until)
                os._exit(0)
            children.append(child)
        for child in children:
            os.waitpid(child, 0)
        time.sleep(rng.uniform(*IDLE_S))


def bursty_load(seed: int) -> subprocess.Popen:
    """The bursts as a process of their own, running until killed (terminate() ends its workers too)."""
    return subprocess.Popen([sys.executable, __file__, "--seed", str(seed)])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seconds", type=float)
    options = parser.parse_args()
    run(options.seed, options.seconds)
