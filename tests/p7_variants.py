"""Buggy versions of the p7 reference solution and the checks each must lose, and a correct
one written another way."""
from __future__ import annotations

from variants import Variant

SCRIPT = "p7_pipeline.py"
ALL_CHECKS = ("p2p_values", "schedule_order", "clean_exit", "pipeline_answers")
ONE_F_ONE_B = """        warmup = min(stages - stage - 1, micro_batches)
        for i in range(warmup):
            forward(i, xs, ys, stash, pending)
        for i in range(micro_batches - warmup):
            forward(warmup + i, xs, ys, stash, pending)
            backward(i, stash, pending)
        for i in range(micro_batches - warmup, micro_batches):
            backward(i, stash, pending)
"""
GPIPE = """        for i in range(micro_batches):
            forward(i, xs, ys, stash, pending)
        for i in range(micro_batches):
            backward(i, stash, pending)
"""

VARIANTS = (
    Variant(
        "gpipe_order_labelled_1f1b",
        ((SCRIPT, ONE_F_ONE_B, GPIPE),),
        frozenset({"schedule_order"}),
        {"schedule_order": "1f1b (1 node × 2 ranks): 1f1b: stage 0 had 3 micro-batches in flight, at most 2 in 1F1B (S − stage = 2 − 0)"},
    ),
    Variant(
        "mean_loss_per_micro_batch_sends_wrong_gradients",
        ((SCRIPT, "        out = loss_fn(out, ys[i].to(device)) / batch_size\n", "        out = loss_fn(out, ys[i].to(device)) / len(ys[i])\n"),),
        frozenset({"p2p_values"}),
        {"p2p_values": "step 0: the first gradient stage 1 sent stage 0 ("},
    ),
    Variant(
        "gpipe_drops_the_first_micro_batch",
        ((SCRIPT, GPIPE, GPIPE.replace("range(micro_batches)", "range(1, micro_batches)")),),
        frozenset({"p2p_values"}),
        {"p2p_values": "gpipe (1 node × 2 ranks): step 0: after the activations of micro-batches [1, 2, 3], stage 0 sent stage 1 one that is none of the step's"},
    ),
    Variant(
        "1f1b_warm_up_reversed_deadlocks",
        ((SCRIPT, "        warmup = min(stages - stage - 1, micro_batches)\n", "        warmup = min(stage, micro_batches)\n"),),
        frozenset({"p2p_values", "schedule_order", "clean_exit"}),
        {"clean_exit": "1f1b (1 node × 2 ranks): "},
    ),
    Variant(  # gloo's send waits for its receiver: in 1F1B each stage sends to one that is sending back
        "1f1b_blocking_sends_deadlock",
        (
            (SCRIPT, "        pending.append(dist.isend(out.detach(), dst=stage + 1))\n", "        dist.send(out.detach(), dst=stage + 1)\n"),
            (SCRIPT, "        pending.append(dist.isend(inp.grad, dst=stage - 1))\n", "        dist.send(inp.grad, dst=stage - 1)\n"),
        ),
        frozenset({"p2p_values", "schedule_order", "clean_exit"}),
        {"clean_exit": "1f1b (1 node × 2 ranks): hung: "},
    ),
)

# Correct, in another way: every send and receive a batched P2P operation (dist.P2POp,
# dist.batch_isend_irecv), and the answers as fractions
UNUSUAL_VARIANTS = (
    Variant(
        "batched_p2p_ops_and_fractions",
        (
            (SCRIPT, "        dist.recv(inp, src=stage - 1)\n", "        dist.batch_isend_irecv([dist.P2POp(dist.irecv, inp, stage - 1)])[0].wait()\n"),
            (SCRIPT, "        pending.append(dist.isend(out.detach(), dst=stage + 1))\n", "        pending.extend(dist.batch_isend_irecv([dist.P2POp(dist.isend, out.detach(), stage + 1)]))\n"),
            (SCRIPT, "        dist.recv(grad, src=stage + 1)\n", "        dist.batch_isend_irecv([dist.P2POp(dist.irecv, grad, stage + 1)])[0].wait()\n"),
            (SCRIPT, "        pending.append(dist.isend(inp.grad, dst=stage - 1))\n", "        pending.extend(dist.batch_isend_irecv([dist.P2POp(dist.isend, inp.grad, stage - 1)]))\n"),
            ("answers.yaml", "  s2_m4: 0.2 ", '  s2_m4: "1/5" '),
            ("answers.yaml", "  s4_m8: 0.2727 ", '  s4_m8: "3/11" '),
        ),
        frozenset(),
    ),
)
