"""Buggy versions of the p6 reference solution, each made by exact text replacements so
that they follow the solution when it changes (a replacement that no longer matches fails
the test loudly)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = ROOT / "solutions" / "p6" / "p6_ddp.py"
ALL_CHECKS = ("rank_setup", "device_mapping", "batch_shard", "grad_sync", "params_sync", "clean_exit")


@dataclass(frozen=True)
class Variant:
    name: str
    replacements: tuple[tuple[str, str], ...]
    loses: frozenset[str]  # the checks it must fail; it must pass all the others
    messages: dict  # check id -> a fragment its feedback must contain
    timeout_s: float | None = None  # a shorter run timeout for variants that hang

    def write(self, folder: Path) -> Path:
        text = SOLUTION.read_text()
        for old, new in self.replacements:
            assert text.count(old) == 1, f"variant {self.name}: {old!r} is not exactly once in the solution"
            text = text.replace(old, new)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / SOLUTION.name).write_text(text)
        return folder


WRAP = '    model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)\n'
SHARD = "    x = x[rank * shard : (rank + 1) * shard].to(device)\n    y = y[rank * shard : (rank + 1) * shard].to(device)\n"
LOSS = "    loss = loss_fn(model(x), y)\n"

VARIANTS = (
    Variant(
        "not_wrapped",
        ((WRAP, "    pass  # the model is never wrapped in DDP\n"),),
        frozenset({"grad_sync", "params_sync"}),
        {"grad_sync": "no all-reduce at all: is the model wrapped in DistributedDataParallel?", "params_sync": "differ between rank 0 and rank 1"},
    ),
    Variant(
        "full_batch_everywhere",
        ((SHARD, "    x, y = x.to(device), y.to(device)\n"),),
        frozenset({"batch_shard"}),
        {"batch_shard": "every rank trains on the whole batch"},
    ),
    Variant(
        "local_rank_from_rank",
        (('local_rank = int(os.environ["LOCAL_RANK"])', 'local_rank = int(os.environ["RANK"])'),),
        frozenset({"rank_setup"}),
        {"rank_setup": "local_rank = 2, expected 0 (LOCAL_RANK"},
    ),
    Variant(
        "averaged_twice",
        ((LOSS, "    loss = loss_fn(model(x), y) / world_size\n"),),
        frozenset({"grad_sync", "params_sync"}),
        {"grad_sync": "averaged twice", "params_sync": "differ from single-process training"},
    ),
    Variant(
        "rank1_skips_backward",
        (("    loss.backward()  #", "    if rank != 1:\n        loss.backward()  #"),),
        frozenset({"grad_sync", "params_sync", "clean_exit"}),
        {"clean_exit": "rank 0 lost contact with the other ranks in a collective at p6_ddp.py:"},
    ),
    Variant(
        "rank1_skips_backward_then_barrier",
        (
            ("    loss.backward()  #", "    if rank != 1:\n        loss.backward()  #"),
            ("    dist.destroy_process_group()  #", "    dist.barrier()\n    dist.destroy_process_group()  #"),
        ),
        frozenset({"grad_sync", "params_sync", "clean_exit"}),
        {"clean_exit": "did not finish within 5 s (a hang?): rank 0 waits at p6_ddp.py:", "grad_sync": "rank 1 waits at p6_ddp.py:"},
        timeout_s=5,
    ),
    Variant(
        "rank1_raises",
        (("t0 = time.time()\n", 't0 = time.time()\nif rank == 1:\n    raise RuntimeError("rank 1 gives up")\n'),),
        frozenset({"batch_shard", "grad_sync", "params_sync", "clean_exit"}),
        {"clean_exit": "rank 1 raised RuntimeError: rank 1 gives up at p6_ddp.py", "batch_shard": "rank 1 never ran the model"},
    ),
    Variant(
        "never_destroyed",
        (("    dist.destroy_process_group()  #", "    pass  #"),),
        frozenset({"clean_exit"}),
        {"clean_exit": "never called dist.destroy_process_group()"},
    ),
    Variant(
        "world_size_hardcoded",
        (('world_size = int(os.environ["WORLD_SIZE"])', "world_size = 2"),),
        frozenset({"rank_setup", "batch_shard", "grad_sync", "params_sync"}),
        {"rank_setup": "world_size = 2, expected 4", "batch_shard": "expected 21 (= 64 // 3)"},
    ),
)
