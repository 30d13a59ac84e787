"""Real ranks over the grader's hub, without the launcher: `python tests/transport_ranks.py
SCENARIO WORLD [WAIT_S]` forks WORLD ranks that each get one end of a socket pair, installs the
transport's process groups in them (grader.probe.transport.client) and runs the scenario's
rank function, while this process serves their collectives (grader.probe.transport.hub).
It prints one JSON object: each rank's result (or its traceback) and a summary of the hub's
report. torch is imported before any rank is forked, as the grader's launcher does.
"""
from __future__ import annotations

import json
import os
import pickle
import socket
import sys
import traceback
from typing import Any, Callable

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from grader.probe.transport.client import install  # noqa: E402
from grader.probe.transport.hub import Hub  # noqa: E402
from grader.probe.transport.traffic import CarrierPlan, unpack, pack  # noqa: E402
from grader.probe.transport.wire import pass_credentials  # noqa: E402


def every_collective(rank: int, world: int) -> dict:
    """Each kind of operation once, with values that show who sent what."""
    out: dict[str, Any] = {}
    dist.init_process_group("gloo")
    out["backend"] = dist.get_backend()
    t = torch.tensor([float(rank + 1)] * 3)
    dist.all_reduce(t)
    out["all_reduce"] = t.tolist()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    out["all_reduce_max"] = t.tolist()
    t = torch.tensor([float(rank)])
    dist.broadcast(t, src=world - 1)
    out["broadcast"] = t.tolist()
    outs = [torch.zeros(2) for _ in range(world)]
    dist.all_gather(outs, torch.full((2,), float(rank)))
    out["all_gather"] = [o.tolist() for o in outs]
    flat = torch.zeros(world * 2)
    dist.all_gather_into_tensor(flat, torch.full((2,), float(rank)))
    out["all_gather_into_tensor"] = flat.tolist()
    t = torch.tensor([float(rank + 1)])
    dist.reduce(t, dst=0)
    out["reduce"] = t.tolist()
    o = torch.zeros(1)
    dist.reduce_scatter(o, [torch.full((1,), float(rank * 10 + i)) for i in range(world)])
    out["reduce_scatter"] = o.tolist()
    o = torch.zeros(2)
    dist.reduce_scatter_tensor(o, torch.arange(world * 2, dtype=torch.float32) + rank)
    out["reduce_scatter_tensor"] = o.tolist()
    gathered = [torch.zeros(1) for _ in range(world)] if rank == 0 else None
    dist.gather(torch.tensor([float(rank)]), gathered, dst=0)
    out["gather"] = [g.tolist() for g in gathered] if gathered else None
    o = torch.zeros(1)
    dist.scatter(o, [torch.tensor([float(i * 100)]) for i in range(world)] if rank == 0 else None, src=0)
    out["scatter"] = o.tolist()
    o = torch.zeros(world)
    dist.all_to_all_single(o, torch.arange(world, dtype=torch.float32) + 10 * rank)
    out["all_to_all_single"] = o.tolist()
    dist.barrier()
    if rank == 0:
        dist.send(torch.tensor([42.0]), dst=world - 1)
    elif rank == world - 1:
        x = torch.zeros(1)
        dist.recv(x, src=0)
        out["recv"] = x.tolist()
    objects: list[Any] = [None] * world
    dist.all_gather_object(objects, {"rank": rank})
    out["all_gather_object"] = objects
    waits = [dist.all_reduce(torch.ones(1) * rank, async_op=True) for _ in range(3)]
    for work in waits:
        work.wait()
    pair = dist.new_group([0, 1])
    if rank in (0, 1):
        t = torch.ones(1) * (rank + 5)
        dist.all_reduce(t, group=pair)
        out["subgroup"] = t.tolist()
    dist.destroy_process_group()
    return out


def ddp_training(rank: int, world: int) -> dict:
    """Two steps of DDP on rank-strided shards: the parameters must be single-process training's."""
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(4 * world, 4, generator=g), torch.randn(4 * world, 1, generator=g)
    for _ in range(2):
        loss = torch.nn.functional.mse_loss(ddp(x[rank::world]), y[rank::world])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    dist.destroy_process_group()
    return {"params": [p.detach().reshape(-1).tolist() for p in model.parameters()]}


def single_process_training(world: int) -> list[list[float]]:
    """What ddp_training's ranks must end with."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(4 * world, 4, generator=g), torch.randn(4 * world, 1, generator=g)
    for _ in range(2):
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return [p.detach().reshape(-1).tolist() for p in model.parameters()]


def disagree(rank: int, world: int) -> dict:
    """Rank 0 all-reduces where the others broadcast."""
    dist.init_process_group("gloo")
    t = torch.ones(2)
    try:
        dist.all_reduce(t) if rank == 0 else dist.broadcast(t, src=0)
    except RuntimeError as exc:
        return {"error": str(exc), "type": type(exc).__name__}
    return {"error": None}


def cuda_only_backend(rank: int, world: int) -> dict:
    """A backend for CUDA tensors alone (as NCCL is), given a CPU tensor."""
    dist.init_process_group("cuda:gloo")
    try:
        dist.all_reduce(torch.ones(2))
    except RuntimeError as exc:
        return {"error": str(exc)}
    finally:
        dist.destroy_process_group()
    return {"error": None}


def leaves_early(rank: int, world: int) -> dict:
    """The last rank ends before the all-reduce the others wait in."""
    dist.init_process_group("gloo")
    if rank == world - 1:
        os._exit(0)
    try:
        dist.all_reduce(torch.ones(1))
    except RuntimeError as exc:
        return {"error": str(exc)}
    return {"error": None}


def stays_away(rank: int, world: int) -> dict:
    """The last rank sleeps past the hub's wait, then all-reduces: every member fails."""
    import time

    dist.init_process_group("gloo")
    if rank == world - 1:
        time.sleep(1.5)
    try:
        dist.all_reduce(torch.ones(1))
    except RuntimeError as exc:
        return {"error": str(exc)}
    return {"error": None}


def writes_garbage(rank: int, world: int) -> dict:
    """The last rank writes bytes that are no frame on its socket; the others all-reduce."""
    dist.init_process_group("gloo")
    if rank == world - 1:
        os.write(int(os.environ["HUB_FD"]), b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all}")
        import time

        time.sleep(1)
        return {"error": None}
    try:
        dist.all_reduce(torch.ones(1))
    except RuntimeError as exc:
        return {"error": str(exc)}
    return {"error": None}


def big_all_reduces(rank: int, world: int) -> dict:
    """The p6 timed run's gradient bucket (526,337 floats), all-reduced 30 times: the median time of one."""
    import time

    dist.init_process_group("gloo")
    t = torch.ones(526337)
    times = []
    for _ in range(30):
        start = time.perf_counter()
        dist.all_reduce(t)
        times.append(time.perf_counter() - start)
    dist.destroy_process_group()
    return {"median_ms": sorted(times)[15] * 1000}


def sends_first(rank: int, world: int) -> dict:
    """Both ranks send (blocking) to the other before either receives: a deadlock on gloo,
    whose send waits for its receiver; here each send fails once the hub's wait is over."""
    dist.init_process_group("gloo")
    try:
        dist.send(torch.ones(2), dst=1 - rank)
    except RuntimeError as exc:
        return {"error": str(exc)}
    return {"error": None}


def send_then_recv(rank: int, world: int) -> dict:
    """Rank 0 sends, rank 1 receives and answers: the send's Work completes only once the recv
    took it (rank 1 receives after a barrier, so not before rank 0 looked). Rank 0 receives
    into a leaf that requires grad, which gloo writes as any tensor (torch.distributed.pipelining
    receives into its stages' buffers so from their second step on)."""
    dist.init_process_group("gloo")
    out: dict[str, Any] = {}
    got = torch.zeros(2, requires_grad=rank == 0)
    if rank == 0:
        work = dist.isend(torch.tensor([1.0, 2.0]), dst=1)
        out["completed_before_recv"] = work.is_completed()
        dist.barrier()
        work.wait()
        dist.recv(got, src=1)
    else:
        dist.barrier()
        dist.recv(got, src=0)
        dist.send(got * 10, dst=0)
    out["got"] = got.tolist()
    dist.destroy_process_group()
    return out


def device_mesh(rank: int, world: int) -> dict:
    """DeviceMesh, a functional collective and a DTensor redistribution: c10d's own C++ paths."""
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (world,))
    out = {"functional": funcol.all_reduce(torch.ones(2) * (rank + 1), "sum", mesh).tolist()}
    local = distribute_tensor(torch.arange(4.0 * world).reshape(world * 2, 2), mesh, [Shard(0)])
    out["full"] = local.redistribute(mesh, [Replicate()]).to_local().sum().item()
    dist.destroy_process_group()
    return out


def hands_its_socket(rank: int, world: int) -> dict:
    """Rank 0 joins, hands its connection to the hub to rank 1 (SCM_RIGHTS) and exits; rank 1
    writes a well-formed all-reduce on it, as rank 0's: the hub must not credit it to rank 0."""
    import time

    from grader.probe.transport.wire import Call, TensorMeta, request_frame

    path = f"/tmp/hand-{os.environ['TEST_PORT']}"
    if rank == 1:
        server = socket.socket(socket.AF_UNIX)
        server.bind(path)
        server.listen(1)
    dist.init_process_group("gloo")
    if rank == 0:
        time.sleep(0.3)
        with socket.socket(socket.AF_UNIX) as channel:
            channel.connect(path)
            socket.send_fds(channel, [b"x"], [int(os.environ["HUB_FD"])])
        return {"handed": True}
    connection, _ = server.accept()
    _, (stolen,), _, _ = socket.recv_fds(connection, 1, 1)
    os.unlink(path)
    one = TensorMeta("float32", (1,))
    os.write(stolen, request_frame(Call(99, "0", "all_reduce", "SUM", -1, -1, 0, (one,), (one,))) + b"\0" * 4)
    time.sleep(1)
    return {"wrote": True}


SCENARIOS: dict[str, Callable[[int, int], dict]] = {
    f.__name__: f for f in (every_collective, ddp_training, disagree, cuda_only_backend, leaves_early, stays_away, writes_garbage, big_all_reduces, device_mesh, sends_first, send_then_recv, hands_its_socket)
}


def run(scenario: str, world: int, wait_s: float = 10.0) -> dict:
    """Fork `world` ranks of `scenario` over a hub served here; their results and the report."""
    pairs = [socket.socketpair() for _ in range(world)]
    for hub_end, _ in pairs:
        pass_credentials(hub_end)  # as the launcher does, before any rank exists
    children = []
    for rank in range(world):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            for index, (hub_end, rank_end) in enumerate(pairs):
                hub_end.close()
                if index != rank:
                    rank_end.close()
            fd = pairs[rank][1].detach()
            os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["TEST_PORT"], HUB_FD=str(fd))
            try:
                install(fd)
                result = SCENARIOS[scenario](rank, world)
            except BaseException:  # noqa: BLE001 - the rank's failure is its result
                result = {"traceback": traceback.format_exc()}
            os.write(write, pickle.dumps(result))
            os._exit(0)
        os.close(write)
        children.append((pid, read))
    for _, rank_end in pairs:
        rank_end.close()
    report = unpack(pack(Hub({rank: hub_end for rank, (hub_end, _) in enumerate(pairs)}, plan=CarrierPlan(wait_s, 1 << 20), launcher=os.getpid()).serve()))
    results = []
    for pid, read in children:
        data = b""
        while chunk := os.read(read, 1 << 16):
            data += chunk
        os.waitpid(pid, 0)
        results.append(pickle.loads(data) if data else {"exited": True})
    carried = [{"kind": c.kind, "group": c.group, "error": c.error, "ranks": [p.rank for p in c.members], "kept": [bool(p.data) for p in c.members]} for c in report.carried]
    return {"ranks": results, "carried": carried, "ends": [e.how for e in report.ends], "reference": single_process_training(world) if scenario == "ddp_training" else None}


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]) if len(sys.argv) > 3 else 10.0)))
