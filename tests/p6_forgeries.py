"""Submissions that want p6's points without the work: each forges what the grader would see
(its records, its collectives, its clock) instead of doing data-parallel training, made by
exact text edits of the reference solution. Each must fail every check it targets, with a
message that names what the grader saw (what its hub carried, grader/probe/transport)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from variants import Variant

SCRIPT = "p6_ddp.py"
INIT = "    dist.init_process_group(backend=backend)\n"
WRAP = '    model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)\n'
SHARD = "    x = x[rank * shard : (rank + 1) * shard].to(device)\n    y = y[rank * shard : (rank + 1) * shard].to(device)\n"
BACKWARD = "    loss.backward()  # DDP synchronises the gradients here, bucket by bucket\n"
DESTROY = "    dist.destroy_process_group()  # leave cleanly: every rank reaches this line\n"
IMPORTS = "import torch.distributed as dist\n"
FULL_BATCH = "    x, y = x.to(device), y.to(device)  # every rank: the whole batch, so every rank's gradient is the full-batch one\n"

# the recorder is an object in the student's own process: find it, and its event classes, among
# the objects of the process (the grader's modules are out of sight, not gone: grader/probe/cloak.py)
PROBE = IMPORTS + '''import gc


def recorder():
    return next(o for o in gc.get_objects() if type(o).__name__ == "Probe" and hasattr(o, "emit"))


class _Kinds:
    def __getattr__(self, name):
        return next(o for o in gc.get_objects() if isinstance(o, type) and o.__name__ == name and hasattr(o, "kind"))


forged = _Kinds()
'''


@dataclass(frozen=True)
class Forgery:
    """A cheating variant, the checks it targets and a fragment each one's feedback must hold."""

    variant: Variant
    targets: dict[str, str]

    @property
    def name(self) -> str:
        return self.variant.name

    def assert_fails_its_targets(self, practical: str, folder: Path, results: Path) -> None:
        """Grade `folder` (this forgery, written) untimed: every targeted check scores 0 (as the
        untouched template does) and its feedback holds the target's fragment."""
        from helpers import checks_by_id, grade_in_process

        extra = ["--timeout", str(self.variant.timeout_s)] if self.variant.timeout_s else []
        checks = checks_by_id(grade_in_process(practical, folder, results, *extra))
        for check_id, fragment in self.targets.items():
            assert checks[check_id]["status"] == "failed" and checks[check_id]["score"] == 0, (check_id, checks[check_id]["output"])
            assert fragment in checks[check_id]["output"], (check_id, checks[check_id]["output"])


def forgery(name: str, edits: tuple[tuple[str, str, str], ...], targets: dict[str, str]) -> Forgery:
    return Forgery(Variant(name, edits, frozenset(targets)), targets)


NONE_AT_ALL = "your ranks made no all-reduce that could carry its gradients"  # what the grader's hub carried
NOT_THE_GRADIENT = "none of your ranks' "  # … all-reduce(s) from here on delivered the full-batch gradient at the step's parameters

FORGERIES = (
    forgery(
        "forged_records_without_a_process_group",
        (
            (SCRIPT, IMPORTS, PROBE),
            (SCRIPT, INIT, '    recorder().emit(forged.InitPg, requested=backend, backend="gloo", rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))\n'),
            (SCRIPT, WRAP, '    recorder().emit(forged.DdpArgs, find_unused_parameters=False, static_graph=False, gradient_as_bucket_view=False, bucket_cap_mb=None)\n    recorder().emit(forged.Ddp, device_ids=None, param_devices=("cpu",))\n'),
            (SCRIPT, SHARD, FULL_BATCH),
            (SCRIPT, BACKWARD, BACKWARD + '    recorder().emit(forged.AllReduce, source="ddp", numel=2177, bytes=8708, bucket=0, async_op=True, dur=0.001)\n'),
            (SCRIPT, DESTROY, '    recorder().emit(forged.DestroyPg, default_group=True)\n'),
        ),
        {"rank_setup": "the grader's hub saw none start", "grad_sync": NONE_AT_ALL, "params_sync": NONE_AT_ALL},
    ),
    forgery(
        "full_batch_without_communication",
        ((SCRIPT, WRAP, "    pass  # no DDP: every rank trains on the whole batch by itself\n"), (SCRIPT, SHARD, FULL_BATCH)),
        {"grad_sync": "no all-reduce at all: is the model wrapped in DistributedDataParallel?", "params_sync": NONE_AT_ALL},
    ),
    forgery(
        "scalar_all_reduce_decoy",
        (
            (SCRIPT, WRAP, "    pass  # no DDP\n"),
            (SCRIPT, SHARD, FULL_BATCH),
            (SCRIPT, BACKWARD, BACKWARD + "    if ddp:\n        dist.all_reduce(torch.zeros(1))  # one all-reduce per step, for the records\n"),
        ),
        {"grad_sync": NOT_THE_GRADIENT, "params_sync": NOT_THE_GRADIENT},
    ),
    forgery(
        "full_size_zero_all_reduce_with_forged_ddp_options",
        (
            (SCRIPT, IMPORTS, PROBE),
            (SCRIPT, WRAP, "    recorder().emit(forged.DdpArgs, find_unused_parameters=False, static_graph=False, gradient_as_bucket_view=False, bucket_cap_mb=None)\n"),
            (SCRIPT, SHARD, FULL_BATCH),
            (SCRIPT, BACKWARD, BACKWARD + "    if ddp:\n        dist.all_reduce(torch.zeros(2177))  # the size of the model's gradients\n"),
        ),
        {"grad_sync": NOT_THE_GRADIENT, "params_sync": NOT_THE_GRADIENT},
    ),
    forgery(
        "ddp_with_a_hook_that_never_communicates",
        (
            (SCRIPT, WRAP, WRAP + "    def local_only(state, bucket):\n        done = torch.futures.Future()\n        done.set_result(bucket.buffer())\n        return done\n    model.register_comm_hook(None, local_only)\n"),
            (SCRIPT, SHARD, FULL_BATCH),
        ),
        {"grad_sync": NONE_AT_ALL, "params_sync": NONE_AT_ALL},
    ),
    forgery(
        "no_sync_in_every_step",
        (
            (SCRIPT, "    loss = loss_fn(model(x), y)\n    optimizer.zero_grad(set_to_none=True)\n" + BACKWARD, "    with model.no_sync():  # never all-reduce: every rank has the whole batch\n        loss = loss_fn(model(x), y)\n        optimizer.zero_grad(set_to_none=True)\n        loss.backward()\n"),
            (SCRIPT, SHARD, FULL_BATCH),
        ),
        {"grad_sync": NONE_AT_ALL, "params_sync": NONE_AT_ALL},
    ),
    forgery(
        "ddp_over_a_dummy_model",
        (
            (SCRIPT, WRAP, "    dummy = DDP(nn.Linear(1, 1))  # something for DDP to all-reduce; the real model is trained alone\n"),
            (SCRIPT, SHARD, FULL_BATCH),
            (SCRIPT, BACKWARD, BACKWARD + "    if ddp:\n        dummy(torch.ones(1, 1)).sum().backward()\n"),
        ),
        {"grad_sync": NOT_THE_GRADIENT, "params_sync": NOT_THE_GRADIENT},
    ),
    forgery(
        "kills_every_other_process",
        (
            (
                SCRIPT,
                WRAP,
                "    import signal\n    for pid in (int(p) for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()):\n"
                "        try:\n            with open(f'/proc/{pid}/stat') as stat:\n                sibling = int(stat.read().rsplit(')', 1)[1].split()[1]) == os.getppid()\n"
                "            if sibling:  # the other ranks, and the grader's hub among them\n                os.kill(pid, signal.SIGKILL)\n"
                "        except (OSError, ValueError):\n            pass\n" + WRAP,
            ),
        ),
        {"grad_sync": "", "params_sync": ""},
    ),
    forgery(
        "prints_a_forged_hub_report",
        (
            (SCRIPT, WRAP, "    pass  # no DDP\n"),
            (SCRIPT, SHARD, FULL_BATCH),
            (
                SCRIPT,
                DESTROY,
                DESTROY
                + "    fake = '{\"event\":\"traffic\",\"job\":\"ws2\",\"part\":0,\"parts\":1,\"data\":\"\"}'\n    print(fake, flush=True)\n    print(fake, file=sys.stderr, flush=True)\n"
                + "    try:\n        with open(f'/proc/{os.getppid()}/fd/1', 'w') as pipe:\n            pipe.write(fake + '\\n')\n    except OSError:\n        pass\n",
            ),
        ),
        {"grad_sync": NONE_AT_ALL, "params_sync": NONE_AT_ALL},
    ),
)

# Records that claim what the program did not do (extra all-reduces) decide nothing: the verdict
# rests on what the hub carried, and a script that trains right with lying records keeps its points.
RECORDS_CLAIM_EXTRA_ALL_REDUCES = Variant(
    "records_claim_extra_all_reduces",
    (
        (SCRIPT, IMPORTS, PROBE),
        (SCRIPT, BACKWARD, BACKWARD + '    if ddp:\n        recorder().emit(forged.AllReduce, source="ddp", numel=2177, bytes=8708, bucket=1, async_op=True, dur=0.001)\n'),
    ),
    frozenset(),
)
