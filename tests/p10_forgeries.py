"""Submissions that want p10's points without the work: each forges the all-reduce pattern, the
gradients or the whole record of a run instead of hybrid training, made by exact text edits of
the reference solution (the forgery kit is p6's, tests/p6_forgeries.py). Each must fail every
check it targets, with a message that names what the grader's hub carried."""
from __future__ import annotations

from p6_forgeries import IMPORTS, NONE_AT_ALL, NOT_THE_GRADIENT, PROBE, forgery
from variants import Variant

SCRIPT = "p10_hybrid.py"
WRAP = "    model = DDP(model, device_ids=None)\n"
SHARD = "    x, y = x[rank * shard : (rank + 1) * shard], y[rank * shard : (rank + 1) * shard]\n"
FULL_BATCH = "    pass  # every rank keeps the whole batch\n"
LOSS = "            loss = loss_fn(out, my.to(stage2_device)) / shard\n"
WHOLE_BATCH_LOSS = "            loss = loss_fn(out, my.to(stage2_device)) / batch_size\n"
SYNC_LAST = "        with model.no_sync() if ddp and not last else nullcontext():\n"
REPLAY = "replays_an_earlier_runs_records"  # its ranks' records of an earlier run are written beside it by the test

# torch.distributed.all_reduce replaced by one that returns at once, as if every rank had sent
# the same: DDP's all-reduces (through the default communication hook) never communicate
NO_ALL_REDUCE = IMPORTS + '''

class Done:
    def __init__(self, tensor):
        self.tensor = tensor

    def wait(self, *args):
        return True

    def is_completed(self):
        return True

    def get_future(self):
        future = torch.futures.Future()
        future.set_result([self.tensor])
        return future


def all_reduce_without_communication(tensor, *args, **kwargs):
    tensor.mul_(dist.get_world_size())  # the default hook divides by the world size first
    return Done(tensor) if kwargs.get("async_op") else None


dist.all_reduce = all_reduce_without_communication
'''

FORGERIES = (
    forgery(
        "loss_all_reduced_instead_of_the_gradients",
        (
            (SCRIPT, SHARD, FULL_BATCH),
            (SCRIPT, LOSS, WHOLE_BATCH_LOSS),
            (SCRIPT, SYNC_LAST, "        with model.no_sync() if ddp else nullcontext():  # DDP never all-reduces\n"),
            (SCRIPT, "            loss.backward()\n", "            loss.backward()\n        if ddp and last:\n            dist.all_reduce(loss.detach())  # one all-reduce in the last micro-batch, for the records\n"),
        ),
        {"sync_pattern": NOT_THE_GRADIENT, "grad_sync": NOT_THE_GRADIENT, "params_sync": NOT_THE_GRADIENT},
    ),
    forgery(
        "torch_distributed_all_reduce_monkeypatched",
        ((SCRIPT, IMPORTS, NO_ALL_REDUCE), (SCRIPT, SHARD, FULL_BATCH), (SCRIPT, LOSS, WHOLE_BATCH_LOSS)),
        {"sync_pattern": NONE_AT_ALL, "grad_sync": NONE_AT_ALL, "params_sync": NONE_AT_ALL},
    ),
    forgery(
        REPLAY,
        (
            (
                SCRIPT,
                IMPORTS,
                PROBE
                + "\nearlier = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'earlier', f\"rank{os.environ.get('RANK', '0')}.jsonl\")\n"
                + "with open(earlier, 'rb') as source, open(recorder().path, 'ab') as records:\n    records.write(source.read())\nsys.exit(0)\n",
            ),
        ),
        {"sync_pattern": "the records of your process are damaged", "grad_sync": "the records of your process are damaged", "params_sync": "the records of your process are damaged"},
    ),
)


# Every micro-batch all-reduced, hidden from the records: the hub carried them all, so it loses
# what the honest every-micro-batch variant loses (half of sync_pattern), and no more.
EVERY_MICRO_BATCH_HIDDEN = Variant(
    "every_micro_batch_synced_and_hidden_from_the_records",
    (
        (SCRIPT, IMPORTS, PROBE + "HIDE = [False]  # drop the all-reduce records of all but the last micro-batch\n"),
        (
            SCRIPT,
            WRAP,
            WRAP
            + "    probe = recorder()\n    keep = probe.span\n\n"
            + "    def span(kind, mark, end=None, **fields):\n        if kind.__name__ == 'AllReduce' and HIDE[0]:\n            return None\n        return keep(kind, mark, end, **fields)\n\n"
            + "    probe.span = span\n",
        ),
        (SCRIPT, SYNC_LAST, "        HIDE[0] = not last\n        with nullcontext():  # DDP all-reduces in every micro-batch\n"),
    ),
    frozenset({"sync_pattern"}),
    {"sync_pattern": "an all-reduce in every micro-batch (4 per step, as the grader's hub carried them) (your rank 0's records: all-reduces per micro-batch [0, 0, 0, 1])"},
)
