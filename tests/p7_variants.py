"""Buggy versions of the p7 reference solution and the checks each must lose, and correct ones
written another way."""
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
GPIPE_BACKWARD = "        for i in range(micro_batches):\n            backward(i, stash, pending)\n"
LOSS = "        out = loss_fn(out, ys[i].to(device)) / batch_size\n"
FORWARD_DEF = "def forward(i, xs, ys, stash, pending):\n"
RECV = """        inp = torch.empty(len(xs[i]), dim, device=device)
        dist.recv(inp, src=stage - 1)
"""
SEND_ACTIVATION = "        pending.append(dist.isend(out.detach(), dst=stage + 1))\n"
RECV_GRADIENT = "        grad = torch.empty_like(out)\n        dist.recv(grad, src=stage + 1)\n        out.backward(grad)\n"
SEND_GRADIENT = "    if not first:\n        pending.append(dist.isend(inp.grad, dst=stage - 1))\n"

VARIANTS = (
    Variant(
        "gpipe_order_labelled_1f1b",
        ((SCRIPT, ONE_F_ONE_B, GPIPE),),
        frozenset({"schedule_order"}),
        {"schedule_order": "1f1b (1 node × 2 ranks): 1f1b: stage 0 had 4 micro-batches in flight, at most 2 in 1F1B (S − stage = 2 − 0)"},
    ),
    Variant(
        "mean_loss_per_micro_batch_sends_wrong_gradients",
        ((SCRIPT, LOSS, LOSS.replace("batch_size", "len(ys[i])")),),
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
    Variant(
        "loss_summed_not_divided_by_batch_size",
        ((SCRIPT, LOSS, "        out = loss_fn(out, ys[i].to(device))\n"),),
        frozenset({"p2p_values"}),
        {"p2p_values": "step 0: the first gradient stage 1 sent stage 0 ("},
    ),
    Variant(  # both stages run the first three micro-batches of each step, in 1F1B order: the fourth never trains
        "1f1b_drops_the_last_micro_batch",
        ((SCRIPT, ONE_F_ONE_B, ONE_F_ONE_B.replace("micro_batches", "(micro_batches - 1)")),),
        frozenset({"p2p_values"}),
        {"p2p_values": "1f1b (1 node × 2 ranks): step 0: after the activations of micro-batches [0, 1, 2], stage 0 sent stage 1 one that is none of the step's"},
    ),
    Variant(  # the last stage answers each micro-batch before its activation came: a gradient it cannot have computed
        "last_stage_sends_a_made_up_gradient_before_the_activation_arrives",
        (
            (SCRIPT, RECV, "        if last:  # the gradient goes back at once, made up\n            pending.append(dist.isend(torch.zeros(len(xs[i]), dim, device=device), dst=stage - 1))\n" + RECV),
            (SCRIPT, SEND_GRADIENT, SEND_GRADIENT.replace("if not first:", "if not first and not last:")),
        ),
        frozenset({"p2p_values", "schedule_order"}),
        {
            "p2p_values": "step 0: the first gradient stage 1 sent stage 0 (",
            "schedule_order": "gpipe (1 node × 2 ranks): gpipe: stage 1 sent back a gradient of a micro-batch whose activation had not reached it",
        },
    ),
    Variant(  # stage 0 takes the newest micro-batch's gradient for the oldest's: its weights leave the grader's training
        "gpipe_last_stage_backward_newest_first",
        ((SCRIPT, GPIPE_BACKWARD, GPIPE_BACKWARD.replace("range(micro_batches)", "(reversed(range(micro_batches)) if last else range(micro_batches))")),),
        frozenset({"p2p_values"}),
        {"p2p_values": "gpipe (1 node × 2 ranks): step 1: the first activation stage 0 sent stage 1 ("},
    ),
)

PREFETCH = '''prefetched = {}  # micro-batch -> (buffer, Work) of a receive posted ahead of time


def receive(i, xs):
    """Post the receive of micro-batch i's activation (flat); it completes while this stage computes."""
    buffer = torch.empty(len(xs[i]) * dim, device=device)
    return buffer, dist.irecv(buffer, src=stage - 1)


'''

# Correct, in other ways: every send and receive a batched P2P operation (dist.P2POp,
# dist.batch_isend_irecv), and the answers as fractions; a stage that posts the receive of the
# next micro-batch's activation before it computes the one it has (irecv), activations and
# gradients sent flat, and GPipe's backward passes newest first on every stage
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
    Variant(
        "irecv_prefetch_flat_sends_and_gpipe_backward_newest_first",
        (
            (SCRIPT, FORWARD_DEF, PREFETCH + FORWARD_DEF),
            (
                SCRIPT,
                RECV,
                "        if i not in prefetched:  # the step's first micro-batch: nothing posted yet\n            prefetched[i] = receive(i, xs)\n"
                "        buffer, work = prefetched.pop(i)\n        work.wait()\n"
                "        if i + 1 < len(xs):  # the next one lands while this one computes\n            prefetched[i + 1] = receive(i + 1, xs)\n"
                "        inp = buffer.view(-1, dim)\n",
            ),
            (SCRIPT, SEND_ACTIVATION, "        pending.append(dist.isend(out.detach().reshape(-1), dst=stage + 1))\n"),
            (SCRIPT, RECV_GRADIENT, "        grad = torch.empty(out.numel(), device=device)\n        dist.recv(grad, src=stage + 1)\n        out.backward(grad.view_as(out))\n"),
            (SCRIPT, SEND_GRADIENT, "    if not first:\n        pending.append(dist.isend(inp.grad.flatten(), dst=stage - 1))\n"),
            (SCRIPT, GPIPE_BACKWARD, GPIPE_BACKWARD.replace("range(micro_batches)", "reversed(range(micro_batches))")),
        ),
        frozenset(),
        {"schedule_order": "1f1b (1 node × 2 ranks): 1f1b: micro-batches in flight at most [2, 1] (by stage)"},
    ),
)
