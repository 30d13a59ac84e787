"""Submissions that want p7's points without the pipeline's sends: made by exact text edits of
the reference solution, graded as p6's forgeries are (tests/p6_forgeries.py). Each must fail
every check it targets, with a message that names what the grader's hub carried."""
from __future__ import annotations

from p6_forgeries import forgery

SCRIPT = "p7_pipeline.py"
IDENTITY = "first, last = stage == 0, stage == stages - 1\n"

# torch.distributed's isend and recv replaced by ones that pass the tensors through torchrun's
# rendezvous store, a channel beside the process group, each with a record of a send or a
# receive written in the recorder's file: the pipeline does its work, its records claim the sends
THROUGH_THE_STORE = IDENTITY + '''store = dist.distributed_c10d._get_default_store()
# the recorder, an object of this process, and its event class of a point-to-point call
probe = next(o for o in gc.get_objects() if type(o).__name__ == "Probe" and hasattr(o, "emit"))
P2p = probe.emit.__func__.__globals__["P2p"]
passed = {}  # (from, to) -> tensors so far


def _key(source, target):
    passed[source, target] = passed.get((source, target), 0) + 1
    return f"{source}-{target}-{passed[source, target]}"


class Done:
    def wait(self, *args):
        return True


def isend(tensor, dst):
    store.set(_key(stage, dst), tensor.detach().numpy().tobytes())
    probe.emit(P2p, op="isend", peer=dst, numel=tensor.numel(), dur=0.0)
    return Done()


def recv(tensor, src):
    tensor.copy_(torch.frombuffer(bytearray(store.get(_key(src, stage))), dtype=tensor.dtype).view_as(tensor))
    probe.emit(P2p, op="recv", peer=src, numel=tensor.numel(), dur=0.001)
    return src


dist.isend, dist.recv = isend, recv
'''

NOTHING_CARRIED = "no activation or gradient crossed between the stages"

FORGERIES = (
    forgery(
        "sends_through_the_store_with_forged_records",
        (
            (SCRIPT, "import os\n", "import gc\nimport os\n"),
            (SCRIPT, IDENTITY, THROUGH_THE_STORE),
        ),
        {"p2p_values": NOTHING_CARRIED, "schedule_order": "no activation reached or left stage 0"},
    ),
)
