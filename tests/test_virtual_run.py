"""`python -m grader run --virtual-gpus N -- CMD`: any script, unmodified, on virtual GPUs."""
from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from helpers import ROOT, run_cli

DATAPARALLEL = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 2)

    def forward(self, x):
        print(f"Inside model on device {x.device}, shape: {x.shape}")
        return self.fc(x)

model = nn.DataParallel(Model().to("cuda:0"))
out = model(torch.randn(64, 8).to("cuda:0"))
print("gathered on", out.device, "GPUs:", torch.cuda.device_count(), torch.cuda.is_available())
"""


def test_a_dataparallel_script_sees_five_gpus(tmp_path: Path) -> None:
    script = tmp_path / "dp.py"
    script.write_text(textwrap.dedent(DATAPARALLEL))
    done = run_cli("run", "--virtual-gpus", "5", "--", sys.executable, str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = [13, 13, 13, 13, 12]
    expected = [f"Inside model on device cuda:{i}, shape: torch.Size([{r}, 8])" for i, r in enumerate(rows)]
    assert done.stdout.splitlines() == [*expected, "gathered on cuda:0 GPUs: 5 True"]


def test_exit_codes_pass_through_and_a_missing_command_is_explained(tmp_path: Path) -> None:
    failing = tmp_path / "fail.py"
    failing.write_text("import torch\ntorch.zeros(1).to('cuda:3')\n")
    done = run_cli("run", "--virtual-gpus", "2", "--", sys.executable, str(failing), cwd=tmp_path)
    assert done.returncode == 1 and "CUDA error: invalid device ordinal" in done.stderr
    assert run_cli("run", "--virtual-gpus", "2", "--", "no-such-command-here").returncode == 127
    unsaid = run_cli("run", "--", sys.executable, "-c", "pass")  # no silent default: observe's is 0, run exists for N > 0
    assert unsaid.returncode == 2 and "--virtual-gpus" in unsaid.stderr
    assert run_cli("run").returncode == 2


@pytest.mark.slow
def test_torchrun_workers_see_the_gpus_and_nccl_runs_on_gloo() -> None:
    script = ROOT / "solutions" / "p6" / "p6_ddp.py"
    done = run_cli("run", "--virtual-gpus", "2", "--", sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", str(script), "--steps=2")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Rank: 0 | Local Rank: 0 | World size: 2 | Device: cuda:0" in done.stdout
    assert "Rank: 1 | Local Rank: 1 | World size: 2 | Device: cuda:1" in done.stdout


def test_threads_started_by_the_script_see_the_virtual_devices(tmp_path: Path) -> None:
    script = tmp_path / "threads.py"
    script.write_text(
        "import threading, torch\n"
        "seen = []\n"
        "worker = threading.Thread(target=lambda: seen.append(str(torch.ones(2).to('cuda:1').device)))\n"
        "worker.start(); worker.join()\n"
        "print(seen[0], torch.cuda.memory_allocated(1) >= 0)\n"
    )
    done = run_cli("run", "--virtual-gpus", "2", "--", sys.executable, str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "cuda:1 True"
    assert done.stderr.count("virtual GPUs count the memory of the tensors Python saw on them") == 1  # not a silent wrong number: said once, where the script reads it
