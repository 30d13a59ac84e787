"""Benchmark: grading p6's reference solution against bare torchrun runs of the same script.

    python bench/bench_p6.py [--repeat N]

Two comparisons, each measured in this one process run, alternating grader and bare runs:
  one launch   `python -m grader grade p6 solutions/p6 --world-size 2`
               vs `torchrun --nproc_per_node=2 p6_ddp.py ...`
  full spec    `python -m grader grade p6 solutions/p6` (every run of the spec: world sizes 1-4
               and 2 nodes × 2 ranks) vs bare torchrun of each of those layouts, one after the
               other (the 2-node layout as two torchrun agents meeting on 127.0.0.1).
The grading includes everything a user waits for: starting Python, the grader's own torch
import, the reference computation, the checks and writing results.json. The ratio is
grader / bare (target ≤ 2.0); the minimum of the repeats is compared.
"""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "solutions" / "p6" / "p6_ddp.py"
ARGS = ["--batch_size=64", "--dim=32", "--hidden=64", "--steps=3", "--lr=0.05", "--seed=1234"]
LAYOUTS = [(1, 1), (1, 2), (1, 3), (1, 4), (2, 2)]  # (nodes, ranks per node), as in the spec
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def timed(commands: list[list[str]], cwd: Path) -> float:
    """Wall time of running `commands` concurrently (all must succeed)."""
    started = time.perf_counter()
    procs = [subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for cmd in commands]
    codes = [p.wait() for p in procs]
    elapsed = time.perf_counter() - started
    if any(codes):
        raise SystemExit(f"benchmark command failed ({codes}): {commands}")
    return elapsed


def bare(nodes: int, per_node: int, cwd: Path) -> float:
    if nodes == 1:
        return timed([[*TORCHRUN, f"--nproc_per_node={per_node}", str(SCRIPT), *ARGS]], cwd)
    port = free_port()
    agents = [
        [*TORCHRUN, f"--nnodes={nodes}", f"--node_rank={n}", f"--nproc_per_node={per_node}", "--master_addr=127.0.0.1", f"--master_port={port}", str(SCRIPT), *ARGS]
        for n in range(nodes)
    ]
    return timed(agents, cwd)


def grader(extra: list[str], cwd: Path) -> float:
    return timed([[sys.executable, "-m", "grader", "grade", "p6", str(ROOT / "solutions" / "p6"), "--results", str(cwd / "results.json"), "--seed", "1234", *extra]], ROOT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-p6-"))
    env_note = f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}"
    try:
        one_grader, one_bare, full_grader, full_bare = [], [], [], []
        for _ in range(options.repeat):
            one_grader.append(grader(["--world-size", "2"], work))
            one_bare.append(bare(1, 2, work))
            full_grader.append(grader([], work))
            full_bare.append(sum(bare(n, p, work) for n, p in LAYOUTS))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"p6 grading overhead ({env_note}; minimum of {options.repeat} alternating repeats)")
    for label, graded, plain in (("one launch, 2 ranks", one_grader, one_bare), ("full spec, 5 launches", full_grader, full_bare)):
        ratio = min(graded) / min(plain)
        print(f"  {label:<22} grader {min(graded):6.2f} s   bare torchrun {min(plain):6.2f} s   ratio {ratio:.2f}  (target ≤ 2.0)")


if __name__ == "__main__":
    main()
