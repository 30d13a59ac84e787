"""`python -m grader doctor`: what this machine can do for grading, and the fix for what it cannot.

For a cluster admin on a GPU node, or anyone on a new machine. Each finding comes from trying
the real thing, not from reading configuration:
  driver     `nvidia-smi -L` lists the GPUs
  NVML       the grader's telemetry opens NVML and sees them (nvidia-ml-py)
  CUDA       torch is a CUDA build and sees the GPUs
  NCCL       a NCCL all-reduce between min(2, GPUs) processes, one per GPU, gives the sum
  sandbox    the isolation tier student code gets here: bubblewrap starts the sandbox (and on a
             GPU node torch sees and uses a GPU in it); else, as root, the unprivileged-uid
             tier (a problem for official grading, which refuses it; what Gradescope gets
             on an image without user namespaces); else none
  cgroups    a per-job control group can be made (memory and processes capped, killed whole)
  fidelity   on real GPUs, the fidelity cases (tests/fidelity/cases.py, where the course
             repository has them) give what CUDA is known to give (tests/test_fidelity.py)
Without a GPU the GPU findings say so (not a failure: the grader runs every GPU run on virtual
GPUs there and defers the real-GPU checks) and the rest is checked as anywhere.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from grader.run import procs
from grader.run.cgroups import Caps, open_cgroups
from grader.run.sandbox import IDENTITY, NO_ISOLATION, UID_TIER, Limits, open_sandbox
from grader.run.telemetry import open_nvml

OK, PROBLEM, NOT_HERE = "ok", "problem", "not here"
PROBE_S = 120

NCCL_RANK = """
import os, torch, torch.distributed as dist
rank = int(os.environ["RANK"])
torch.cuda.set_device(rank)
dist.init_process_group("nccl")
x = torch.full((4,), float(rank + 1), device="cuda")
dist.all_reduce(x)
world = dist.get_world_size()
assert torch.allclose(x.cpu(), torch.full((4,), world * (world + 1) / 2)), x
dist.destroy_process_group()
print("ok", torch.cuda.nccl.version() if hasattr(torch.cuda, "nccl") else "")
"""

IN_SANDBOX = """
import getpass, torch
assert torch.cuda.is_available(), "torch sees no GPU in the sandbox"
print(getpass.getuser(), torch.cuda.get_device_name(0), (torch.ones(4, device="cuda") * 2).sum().item())
"""


@dataclass(frozen=True)
class Finding:
    """One thing tried: its name, how it went (ok, problem, or not here: no GPU), what was seen,
    and for a problem the fix."""

    name: str
    status: str
    seen: str
    fix: str = ""


def gpu_count() -> int:
    """CUDA devices torch sees (0 without a CUDA build or a driver)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def driver() -> Finding:
    if shutil.which("nvidia-smi") is None:
        return Finding("driver", NOT_HERE, "no nvidia-smi: no NVIDIA driver on this machine")
    done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        return Finding("driver", PROBLEM, (done.stderr or done.stdout).strip()[:300], "the NVIDIA driver does not answer: check `nvidia-smi` and the kernel module")
    return Finding("driver", OK, "; ".join(done.stdout.strip().splitlines()))


def nvml() -> Finding:
    source = open_nvml()
    if isinstance(source, str):
        status = NOT_HERE if shutil.which("nvidia-smi") is None else PROBLEM
        return Finding("NVML", status, source, "" if status == NOT_HERE else "pip install nvidia-ml-py in the grader's environment; NVML comes with the driver")
    names = list(source.names)
    source.close()
    return Finding("NVML", OK, f"{len(names)} GPU(s): {', '.join(names)}")


def cuda() -> Finding:
    import torch

    build = torch.version.cuda
    if gpu_count():
        return Finding("CUDA", OK, f"torch {torch.__version__} (CUDA {build}) sees {gpu_count()} GPU(s): {torch.cuda.get_device_name(0)}")
    if shutil.which("nvidia-smi") is None:
        return Finding("CUDA", NOT_HERE, f"torch {torch.__version__}: no GPU (the grader runs GPU runs on virtual GPUs and defers the real-GPU checks)")
    if build is None:
        return Finding("CUDA", PROBLEM, f"torch {torch.__version__} is a CPU build on a machine with a GPU", 'rebuild .venv with a CUDA build: rm -rf .venv && TORCH_SPEC="torch==X.Y.Z" bash scripts/setup.sh')
    return Finding("CUDA", PROBLEM, f"torch {torch.__version__} (CUDA {build}) sees no GPU", "CUDA_VISIBLE_DEVICES hides them, or the driver is older than this CUDA build needs")


def nccl() -> Finding:
    gpus = gpu_count()
    if not gpus:
        return Finding("NCCL", NOT_HERE, "no GPU")
    world = min(2, gpus)
    port = procs.free_port()
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", NCCL_RANK],
            env={**os.environ, "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(world)
    ]
    outputs = []
    for process in ranks:
        try:
            outputs.append(process.communicate(timeout=PROBE_S))
        except subprocess.TimeoutExpired:
            for other in ranks:
                other.kill()
            return Finding("NCCL", PROBLEM, f"the all-reduce between {world} ranks did not finish within {PROBE_S} s", "NCCL_DEBUG=INFO shows where it waits (P2P, shared memory, the network interface)")
    failed = [err.strip().splitlines()[-1] if err.strip() else f"exit {p.returncode}" for p, (_, err) in zip(ranks, outputs) if p.returncode != 0]
    if failed:
        return Finding("NCCL", PROBLEM, failed[0][:300], "NCCL_DEBUG=INFO python -m grader doctor shows NCCL's own account")
    note = "" if world > 1 else " (one GPU: a group of one; two ranks need two GPUs)"
    return Finding("NCCL", OK, f"all-reduce between {world} rank(s) on real GPUs gave the sum{note}")


def sandbox() -> Finding:
    opened = open_sandbox(Limits(cpu_s=PROBE_S), fallback=True)
    fix = "see docs/admins.md#sandbox-requirements: bubblewrap, util-linux, unprivileged user namespaces, a Python environment others can read"
    if isinstance(opened, str):
        return Finding("sandbox", PROBLEM, f"tier {NO_ISOLATION}: {opened}", fix)
    try:
        if opened.tier == UID_TIER:
            return Finding("sandbox", PROBLEM, f"tier {opened.describe()}; official grading refuses this tier", fix)
        if not opened.devices:
            return Finding("sandbox", OK, f"tier {opened.describe()}")
        root = opened.new_root("grader-doctor-")
        try:
            opened.prepare_root(root)
            env = {"PATH": "/usr/bin:/bin", "HOME": str(root), **IDENTITY}
            done = subprocess.run(opened.command([opened.python, "-c", IN_SANDBOX], root), capture_output=True, text=True, timeout=PROBE_S, env=env)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        if done.returncode != 0:
            last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"
            return Finding("sandbox", PROBLEM, f"{opened.describe()}; with {', '.join(opened.devices)} passed in, torch failed: {last[:300]}", "the device files must be readable and writable by the sandbox's uid (mode 0666, as the driver makes them)")
        return Finding("sandbox", OK, f"tier {opened.describe()}; a GPU works inside it ({done.stdout.strip()})")
    finally:
        opened.release()


def cgroups() -> Finding:
    opened = open_cgroups(f"doctor-{uuid.uuid4().hex[:8]}", Caps(1 << 30, 64))
    if isinstance(opened, str):
        return Finding("cgroups", PROBLEM, opened, "run the grader as root, or delegate a cgroup subtree to its user (docs/admins.md#cgroups); without them each job runs in a pid namespace and memory is capped per process")
    described = opened.describe()
    opened.close()
    return Finding("cgroups", OK, described)


def fidelity(course_root: Path | None) -> Finding:
    if not gpu_count():
        return Finding("fidelity", NOT_HERE, "no GPU")
    tests = course_root / "tests" / "test_fidelity.py" if course_root else None
    if tests is None or not tests.is_file():
        return Finding("fidelity", NOT_HERE, "the fidelity cases live in the course repository's tests/: run the doctor there")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu", str(tests)], capture_output=True, text=True, timeout=600, cwd=course_root)
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr.strip()[-300:]
    if done.returncode != 0:
        return Finding("fidelity", PROBLEM, last, f"python -m pytest -m gpu {tests} names each case whose real behaviour differs (a torch version the table does not know?)")
    return Finding("fidelity", OK, last)


def examine(course_root: Path | None) -> list[Finding]:
    """Every finding, in order; each check is tried even when one before it failed."""
    checks: list[tuple[str, Callable[[], Finding]]] = [
        ("driver", driver), ("NVML", nvml), ("CUDA", cuda), ("NCCL", nccl), ("sandbox", sandbox), ("cgroups", cgroups), ("fidelity", lambda: fidelity(course_root)),
    ]
    findings = []
    for name, check in checks:
        try:
            findings.append(check())
        except Exception as exc:  # noqa: BLE001 - one broken check must not hide the others
            findings.append(Finding(name, PROBLEM, f"{type(exc).__name__}: {exc}", "report this: the doctor itself failed here"))
    return findings

