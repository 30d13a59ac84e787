"""The cost of virtual GPUs: the same program on the plain CPU and under
`python -m grader run --virtual-gpus N`, whole launches (wall clock) and their training loops
(the times the programs print), the minimum of a few alternating repeats.

    python bench/bench_virtual_gpus.py [--repeats 3]

Prints a Markdown table; the target is a ratio ≤ 1.5.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TORCHRUN = (sys.executable, "-m", "torch.distributed.run", "--standalone")


@dataclass(frozen=True)
class Case:
    """A program launched on the CPU (`plain`) and on `gpus` virtual GPUs (`virtual`), the same
    work either way; `loop` finds the training loop's seconds in its output."""

    name: str
    folder: Path
    plain: tuple[str, ...]
    virtual: tuple[str, ...]
    gpus: int
    loop: re.Pattern


NANOGPT = ROOT / "tests" / "real_programs" / "nanogpt"
NANOGPT_ARGS = (
    "--compile=False",
    "--dtype=float32",
    "--max_iters=30",
    "--eval_interval=1000",
    "--n_layer=4",
    "--n_embd=128",
    "--n_head=4",
    "--block_size=64",
    "--batch_size=8",
)
P6_ARGS = ("--batch_size=256", "--dim=512", "--hidden=1024", "--steps=40", "--lr=0.01", "--log_every=100")
P10_ARGS = ("--batch_size=256", "--dim=256", "--hidden=1024", "--steps=40", "--lr=0.01", "--log_every=100")

CASES = (
    Case(
        "p6 reference, torchrun 2 ranks",
        ROOT / "solutions" / "p6",
        (*TORCHRUN, "--nproc_per_node=2", "p6_ddp.py", *P6_ARGS),
        (*TORCHRUN, "--nproc_per_node=2", "p6_ddp.py", *P6_ARGS),
        2,
        re.compile(r"step +39 .*\| ([\d.]+)s"),
    ),
    Case(
        "p10 reference, torchrun 2 ranks (2 stages each)",
        ROOT / "solutions" / "p10",
        (*TORCHRUN, "--nproc_per_node=2", "p10_hybrid.py", *P10_ARGS),
        (*TORCHRUN, "--nproc_per_node=2", "p10_hybrid.py", *P10_ARGS),
        4,
        re.compile(r"step 39 .*\| ([\d.]+)s"),
    ),
    Case(
        "nanoGPT train.py, 1 process, 30 iterations",
        NANOGPT,
        (sys.executable, "train.py", "--device=cpu", *NANOGPT_ARGS),
        (sys.executable, "train.py", *NANOGPT_ARGS),
        1,
        re.compile(r"iter (?:[1-9]|[12]\d|30): loss [\d.]+, time ([\d.]+)ms"),
    ),
)


def write_data(folder: Path) -> None:
    """nanoGPT's data (its prepare.py, synthetic tokens), where the program reads it."""
    prepare = folder / "data" / "shakespeare_char" / "prepare.py"
    if prepare.exists():
        subprocess.run([sys.executable, str(prepare), "20000"], check=True, capture_output=True, timeout=120)


def launch(command: tuple[str, ...], folder: Path, case: Case, retried: list[str]) -> tuple[float, float]:
    """Run one launch; (wall seconds, training-loop seconds). A launch that aborts (torch's gloo
    can abort a process at exit, with or without virtual GPUs) is run again, and noted."""
    for _attempt in range(3):
        start = time.perf_counter()
        done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=600)
        wall = time.perf_counter() - start
        if done.returncode == 0:
            break
        kind = "virtual GPUs" if "grader" in command else "plain CPU"
        retried.append(
            f"{case.name} on the {kind}: exit {done.returncode} ({'SIGABRT' if 'SIGABRT' in done.stdout + done.stderr else 'see its output'})"
        )
    else:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    found = [float(x) for x in case.loop.findall(done.stdout)]
    if not found:
        raise SystemExit(f"no loop time in the output of {' '.join(command)}:\n{done.stdout[-2000:]}")
    loop = sum(found) / 1000 if case.loop.pattern.endswith("ms") else found[-1]
    return wall, loop


def measure(case: Case, repeats: int, work: Path, retried: list[str]) -> dict[str, tuple[float, float]]:
    """Minimum wall and loop seconds of `repeats` alternating plain and virtual launches."""
    folder = work / case.folder.name
    if not folder.exists():
        shutil.copytree(case.folder, folder)
        write_data(folder)
    virtual = (sys.executable, "-m", "grader", "run", "--virtual-gpus", str(case.gpus), "--", *case.virtual)
    runs: dict[str, list[tuple[float, float]]] = {"plain": [], "virtual": []}
    for _ in range(repeats):
        runs["plain"].append(launch(case.plain, folder, case, retried))
        runs["virtual"].append(launch(virtual, folder, case, retried))
    return {kind: (min(w for w, _ in found), min(loop for _, loop in found)) for kind, found in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    repeats = parser.parse_args().repeats
    print(f"| program | plain CPU: launch / loop | {'virtual GPUs'}: launch / loop | ratio: launch / loop |")
    print("|---|---|---|---|")
    retried: list[str] = []
    with tempfile.TemporaryDirectory() as work:
        for case in CASES:
            found = measure(case, repeats, Path(work), retried)
            (pw, pl), (vw, vl) = found["plain"], found["virtual"]
            ratios = f"{vw / pw:.2f} / {vl / pl:.2f}"
            print(f"| {case.name} ({case.gpus} virtual GPUs) | {pw:.1f} s / {pl:.2f} s | {vw:.1f} s / {vl:.2f} s | {ratios} |", flush=True)
    for line in retried:
        print(f"- run again after it failed: {line}")


if __name__ == "__main__":
    main()
