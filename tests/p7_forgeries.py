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
RELAYED = "what a stage sent was not computed from what it received (relayed from another process, or computed ahead)"

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

# the last stage computes nothing: the stage before it keeps the last stage's part of the model
# too (every stage builds the whole model from the seed), runs its forward and backward passes
# itself and passes the gradient the last stage must send back through torchrun's store. The
# last stage still receives each activation and sends each gradient with the process group, at
# the schedule's moments: the hub carries real sends of the right values, the work was not done
IDLE_OPTIMIZER = "optimizer = torch.optim.SGD(part.parameters(), lr=lr)\n"
IDLE_HELPER = '''# the last stage is idle: the stage before it runs the last stage's part (the head) as well
store = dist.distributed_c10d._get_default_store()
helper = stages - 2
if stage == helper:
    head = model[(stages - 1) * n // stages :].to(device)
    optimizer = torch.optim.SGD([*part.parameters(), *head.parameters()], lr=lr)
else:
    optimizer = torch.optim.SGD(part.parameters(), lr=lr)
'''
FORWARD_PASS = (
    "    out = part(inp)\n    if last:\n        out = loss_fn(out, ys[i].to(device)) / batch_size\n    else:\n"
    "        # isend, not send: a send may wait for its receiver, which in 1F1B may be waiting for us\n"
    "        pending.append(dist.isend(out.detach(), dst=stage + 1))\n"
)
IDLE_FORWARD = '''    if last:  # idle: what it received is not used
        stash[i] = (inp, None)
        return
    out = part(inp)
    if stage == helper:  # the last stage's forward and backward passes, run here
        o = out.detach().requires_grad_()
        (loss_fn(head(o), ys[i].to(device)) / batch_size).backward()
        store.set(f"relay/{step}/{i}", o.grad.cpu().numpy().tobytes())
    pending.append(dist.isend(out.detach(), dst=stage + 1))
'''
BACKWARD_START = "    inp, out = stash.pop(i)\n    if last:\n        out.backward()\n    else:\n"
IDLE_BACKWARD = '''    inp, out = stash.pop(i)
    if last:  # idle: sends back the gradient the stage before it computed
        inp.grad = torch.frombuffer(bytearray(store.get(f"relay/{step}/{i}")), dtype=inp.dtype).view_as(inp).to(device)
    else:
'''

# every stage trains the whole model by itself, all the steps, before its loop (the model from
# the seed, the batches from get_batch), keeping what crosses each cut; its loop then only sends
# the precomputed activations and gradients at the schedule's moments, and ignores what it receives
LOSS_FN = 'loss_fn = nn.MSELoss(reduction="sum")\n'
PRECOMPUTED = LOSS_FN + '''torch.manual_seed(seed)
whole = build_model()
bounds = [s * len(whole) // stages for s in range(stages + 1)]
acts = [[[None] * micro_batches for _ in range(stages - 1)] for _ in range(steps)]  # [step][cut][micro-batch]
grads = [[[None] * micro_batches for _ in range(stages - 1)] for _ in range(steps)]
for k in range(steps):
    whole.zero_grad(set_to_none=True)
    bx, by = get_batch(k)
    for j, (mx, my) in enumerate(zip(bx.tensor_split(micro_batches), by.tensor_split(micro_batches))):
        h, cuts = mx, []
        for s in range(stages):
            if s:
                h.retain_grad()
                cuts.append(h)
            h = whole[bounds[s] : bounds[s + 1]](h)
        (loss_fn(h, my) / batch_size).backward()
        for c, t in enumerate(cuts):
            acts[k][c][j], grads[k][c][j] = t.detach().clone(), t.grad.clone()
    with torch.no_grad():
        for p in whole.parameters():
            p -= lr * p.grad
'''
FORWARD_BODY = (
    "    if first:\n        inp = xs[i].to(device)\n    else:\n        inp = torch.empty(len(xs[i]), dim, device=device)\n"
    "        dist.recv(inp, src=stage - 1)\n        inp.requires_grad_()  # so backward gives the gradient to send back to stage - 1\n"
    + FORWARD_PASS + "    stash[i] = (inp, out)\n"
)
PRECOMPUTED_FORWARD = '''    if not first:
        dist.recv(torch.empty(len(xs[i]), dim, device=device), src=stage - 1)  # received, not used
    if not last:
        pending.append(dist.isend(acts[step][stage][i].to(device), dst=stage + 1))
    stash[i] = None
'''
BACKWARD_BODY = BACKWARD_START + (
    "        grad = torch.empty_like(out)\n        dist.recv(grad, src=stage + 1)\n        out.backward(grad)\n"
    "    if not first:\n        pending.append(dist.isend(inp.grad, dst=stage - 1))\n"
)
PRECOMPUTED_BACKWARD = '''    stash.pop(i)
    if not last:
        dist.recv(torch.empty_like(acts[step][stage][i]), src=stage + 1)  # received, not used
    if not first:
        pending.append(dist.isend(grads[step][stage - 1][i].to(device), dst=stage - 1))
'''

FORGERIES += (
    forgery(
        "idle_last_stage_fed_through_the_store",
        ((SCRIPT, IDLE_OPTIMIZER, IDLE_HELPER), (SCRIPT, FORWARD_PASS, IDLE_FORWARD), (SCRIPT, BACKWARD_START, IDLE_BACKWARD)),
        {"p2p_values": RELAYED, "schedule_order": RELAYED},
    ),
    forgery(
        "every_stage_precomputes_the_whole_training",
        ((SCRIPT, LOSS_FN, PRECOMPUTED), (SCRIPT, FORWARD_BODY, PRECOMPUTED_FORWARD), (SCRIPT, BACKWARD_BODY, PRECOMPUTED_BACKWARD)),
        {"p2p_values": RELAYED, "schedule_order": RELAYED},
    ),
)

# the precomputing forgery again, with bfloat16 sends of one row first, as many as the steps'
# micro-batches each way: had the hub counted sends the checks do not read, its substitutions
# would all have landed on these, and the replayed sends would have passed
DECOY_LOOP = "t0 = time.time()\nfor step in range(steps):\n"
DECOYS = '''for _ in range(steps * micro_batches):
    works = []
    if not last:
        works.append(dist.isend(torch.zeros(1, dim, dtype=torch.bfloat16), dst=stage + 1))
    if not first:
        works.append(dist.isend(torch.zeros(1, dim, dtype=torch.bfloat16), dst=stage - 1))
    if not first:
        dist.recv(torch.empty(1, dim, dtype=torch.bfloat16), src=stage - 1)
    if not last:
        dist.recv(torch.empty(1, dim, dtype=torch.bfloat16), src=stage + 1)
    for work in works:
        work.wait()
'''

FORGERIES += (
    forgery(
        "precomputes_behind_bfloat16_decoys",
        ((SCRIPT, LOSS_FN, PRECOMPUTED), (SCRIPT, FORWARD_BODY, PRECOMPUTED_FORWARD), (SCRIPT, BACKWARD_BODY, PRECOMPUTED_BACKWARD), (SCRIPT, DECOY_LOOP, DECOYS + DECOY_LOOP)),
        {"p2p_values": "step 0: the first activation stage 0 sent stage 1 (1 rows, sum 0) is not the grader's for any micro-batch of the step"},
    ),
)
