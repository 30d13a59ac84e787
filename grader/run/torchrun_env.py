"""The environment torchrun gives each worker, so that ranks started by the grader cannot tell
the difference (torch/distributed/elastic/agent/server/local_elastic_agent.py sets these)."""
from __future__ import annotations

from grader.run.job import Layout


def rank_environment(layout: Layout, rank: int, master_port: int, run_id: str) -> dict[str, str]:
    """The launcher variables of `rank` in `layout`, rendezvous on 127.0.0.1:`master_port`."""
    env = {
        "RANK": rank,
        "LOCAL_RANK": layout.local_rank_of(rank),
        "WORLD_SIZE": layout.world_size,
        "LOCAL_WORLD_SIZE": layout.ranks_per_node,
        "GROUP_RANK": layout.node_of(rank),
        "GROUP_WORLD_SIZE": layout.nodes,
        "ROLE_RANK": rank,
        "ROLE_WORLD_SIZE": layout.world_size,
        "ROLE_NAME": "default",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": master_port,
        "TORCHELASTIC_RUN_ID": run_id,
        "TORCHELASTIC_RESTART_COUNT": 0,
        "TORCHELASTIC_MAX_RESTARTS": 0,
        "TORCHELASTIC_USE_AGENT_STORE": "True",  # torchrun's agent hosts the store (here the job's leader: grader/probe/zygote.py _fork_store)
    }
    if layout.ranks_per_node > 1:
        env["OMP_NUM_THREADS"] = 1  # torchrun's default when it starts several workers per node
    return {key: str(value) for key, value in env.items()}
