"""The local runner with real processes: the launcher's environment, exit statuses, crashes,
timeouts with stacks, and no process left behind."""
from __future__ import annotations

import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from grader.probe.recorder.events import DdpArgs, Globals, Raised
from grader.probe.messages import DdpOptions
from grader.run import procs
from grader.run.job import JobSpec, Layout
from grader.run.local import TOKEN_VARIABLE, LocalRunner, LocalRunnerOptions

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory):
    with LocalRunner(tmp_path_factory.mktemp("runs")) as local:
        yield local


def script_job(tmp_path: Path, name: str, source: str, layout: Layout = Layout(1, 1), timeout_s: float = 30) -> JobSpec:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "main.py").write_text(textwrap.dedent(source))
    return JobSpec(name=name, submission=folder, script="main.py", argv=("--x=1",), layout=layout, timeout_s=timeout_s, watch_globals=("answer",))


def test_ranks_get_torchruns_environment_in_a_multi_node_layout(runner: LocalRunner, tmp_path: Path) -> None:
    job = script_job(
        tmp_path,
        "env",
        """
        import os, sys
        keys = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR"]
        print(" ".join(os.environ[k] for k in keys), sys.argv[1:], __name__)
        answer = 42
        """,
        Layout(2, 2),
    )
    result = runner.run(job)
    assert not result.timed_out and result.error is None
    lines = [r.stdout_tail.strip() for r in result.ranks]
    assert lines == [f"{r} {r % 2} 4 2 {r // 2} 127.0.0.1 ['--x=1'] __main__" for r in range(4)]
    assert [r.status for r in result.ranks] == ["exit:0"] * 4
    assert result.ranks[3].first(Globals).values == {"answer": 42}


def test_ranks_rendezvous_at_a_store_the_leader_hosts_as_torchruns_agent_does(runner: LocalRunner, tmp_path: Path) -> None:
    """As torchrun's agent does, the job's leader hosts the rendezvous store at MASTER_PORT
    before any rank starts: every rank is its client (rank 0 starts no server), and no rank
    waits out a client's back-off for a server not yet listening (0.45 s in one p10 launch in
    seven, when rank 0 hosted it). No process is left behind: the store ends with the job."""
    source = """
        import os, torch.distributed as dist
        dist.init_process_group("gloo")  # every rank a client (the variable says so): someone else serves
        dist.barrier()
        print(os.environ["TORCHELASTIC_USE_AGENT_STORE"], dist.get_rank())
        dist.destroy_process_group()
        """
    result = runner.run(script_job(tmp_path, "store", source, Layout(1, 4)))
    assert not result.timed_out and result.error is None and result.leftovers == 0, result
    assert [r.stdout_tail for r in result.ranks] == [f"True {r}\n" for r in range(4)]


def test_a_job_that_hides_the_gpus_shows_its_ranks_none(runner: LocalRunner, tmp_path: Path) -> None:
    """A GPU node's CPU runs (grader/grade/plan.py on_this_machine): CUDA's own variable, empty, so torch
    sees no device there (checked on an H200 node), as on a machine without one."""
    source = """
        import os, torch
        print(repr(os.environ.get("CUDA_VISIBLE_DEVICES")), torch.cuda.is_available())
        """
    hidden = runner.run(replace(script_job(tmp_path, "hidden", source), hide_gpus=True))
    shown = runner.run(script_job(tmp_path, "shown", source))
    import torch

    assert [hidden.ranks[0].stdout_tail, shown.ranks[0].stdout_tail] == ["'' False\n", f"None {torch.cuda.is_available()}\n"]


def test_a_job_given_ddp_options_builds_every_ddp_with_them_and_records_them(runner: LocalRunner, tmp_path: Path) -> None:
    """The reference solution's timed launches take the submission's DDP options: whatever the
    script passes (here positionally and by keyword), its DDP is built with them."""
    source = """
        import torch, torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        dist.init_process_group("gloo")
        model = DDP(torch.nn.Linear(4, 2), None, find_unused_parameters=False)
        print(model.find_unused_parameters, model.gradient_as_bucket_view, model.bucket_bytes_cap, model.static_graph)
        dist.destroy_process_group()
        """
    chosen = DdpOptions(find_unused_parameters=True, gradient_as_bucket_view=True, bucket_cap_mb=2.0)
    given = runner.run(replace(script_job(tmp_path, "ddp", source), ddp_options=chosen))
    plain = runner.run(script_job(tmp_path, "plain", source))
    assert [r.stdout_tail.split() for r in (given.ranks[0], plain.ranks[0])] == [["True", "True", str(2 * 1024 * 1024), "False"], ["False", "False", str(25 * 1024 * 1024), "False"]]
    recorded = given.ranks[0].first(DdpArgs)
    assert (recorded.find_unused_parameters, recorded.gradient_as_bucket_view, recorded.bucket_cap_mb) == (True, True, 2.0)


def test_exit_statuses_exceptions_and_crashes_are_told_apart(runner: LocalRunner, tmp_path: Path) -> None:
    job = script_job(
        tmp_path,
        "ends",
        """
        import ctypes, os, sys
        rank = int(os.environ["RANK"])
        if rank == 0:
            sys.exit(3)
        if rank == 1:
            raise ValueError("bad value")
        if rank == 2:
            ctypes.string_at(0)  # a segmentation fault
        raise KeyboardInterrupt
        """,
        Layout(1, 4),
    )
    result = runner.run(job)
    assert [r.status for r in result.ranks] == ["exit:3", "exit:1", "signal:11", "exit:130"]
    raised = result.ranks[1].first(Raised)
    assert raised.type == "ValueError" and raised.frames[-1].file == "main.py" and raised.frames[-1].line == 7
    assert result.ranks[2].stack and result.ranks[2].stack[-1].line == 9
    assert "Traceback (most recent call last):\n  File \"main.py\", line 7, in <module>" in result.ranks[1].stderr_tail
    assert "grader" not in result.ranks[1].stderr_tail


def test_a_job_that_stops_using_the_cpu_is_stopped_as_hung_and_a_busy_one_is_not(tmp_path: Path) -> None:
    """The kernel's count of the job's CPU time decides: ranks asleep (or waiting for each
    other) for the stall window are stopped then, with their stacks; ranks that compute for
    longer than the window, or pause for less, run to their end."""
    (tmp_path / "runs").mkdir()
    with LocalRunner(tmp_path / "runs", LocalRunnerOptions(stall_s=1.5)) as watched:
        asleep = watched.run(script_job(tmp_path, "asleep", "import time\nx = sum(range(10**6))\ntime.sleep(300)\n", Layout(1, 2), timeout_s=30))
        busy = watched.run(script_job(tmp_path, "busy", "import time\nfor _ in range(3):\n    time.sleep(0.8)\n    end = time.monotonic() + 1.0\n    while time.monotonic() < end:\n        pass\n", timeout_s=30))
    assert asleep.timed_out and asleep.stalled_s == 1.5 and 1.5 <= asleep.wall_s < 6, asleep.wall_s
    assert all(r.stack and r.stack[-1].code == "time.sleep(300)" for r in asleep.ranks)
    assert not busy.timed_out and busy.stalled_s is None and busy.ranks[0].status == "exit:0", busy
    assert procs.pids_with_env_name(TOKEN_VARIABLE) == []


def test_a_hang_is_killed_at_the_timeout_with_its_stack_and_its_daemons(runner: LocalRunner, tmp_path: Path) -> None:
    job = script_job(
        tmp_path,
        "hang",
        """
        import subprocess, time
        subprocess.Popen(["sleep", "300"], start_new_session=True)  # escapes the process group
        subprocess.Popen(["sh", "-c", "sleep 300 &"])  # orphaned grandchild
        time.sleep(300)
        """,
        Layout(1, 2),
        timeout_s=3,
    )
    result = runner.run(job)
    assert result.timed_out and 3 <= result.wall_s < 6
    assert all(r.status is None for r in result.ranks)
    assert result.ranks[0].stack[-1].code == "time.sleep(300)"
    assert procs.pids_with_env_name(TOKEN_VARIABLE) == []
    assert result.leftovers >= 1  # the setsid one; the other may die with the session


def test_processes_left_after_a_clean_exit_are_counted_and_killed(runner: LocalRunner, tmp_path: Path) -> None:
    job = script_job(tmp_path, "daemon", 'import subprocess\nsubprocess.Popen(["sleep", "300"], start_new_session=True)\n')
    result = runner.run(job)
    assert result.ranks[0].status == "exit:0"
    assert result.leftovers == 1
    assert procs.pids_with_env_name(TOKEN_VARIABLE) == []


def test_output_is_captured_as_a_bounded_tail(runner: LocalRunner, tmp_path: Path) -> None:
    job = script_job(tmp_path, "loud", 'for i in range(200000):\n    print("line", i)\n')
    result = runner.run(job)
    assert result.ranks[0].stdout_tail.endswith("line 199999\n")
    assert len(result.ranks[0].stdout_tail) <= 4100


def test_a_killed_launcher_is_replaced_for_the_next_job(runner: LocalRunner, tmp_path: Path) -> None:
    killer = script_job(tmp_path, "parricide", "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nimport time\ntime.sleep(2)\n")
    result = runner.run(killer)
    assert result.ranks[0].status is None
    after = runner.run(script_job(tmp_path, "after", "print('still working')\n"))
    assert after.ranks[0].stdout_tail == "still working\n"


def test_gpu_telemetry_is_sampled_by_the_runner_and_private_jobs_leave_no_files(tmp_path: Path) -> None:
    """With a GPU source (here a fake NVML), every job's result carries the grader's readings;
    a private job (a reference solution) runs in a folder of its own, outside the submission's;
    every job's folder is removed once it is read."""
    from dataclasses import replace

    from grader.run.telemetry import FakeGpus

    gib = 2**30
    gpus = FakeGpus(["Fake H100"], [80 * gib], [[(gib, 0)], [(3 * gib, 70)]])
    (tmp_path / "runs").mkdir()
    with LocalRunner(tmp_path / "runs", gpus=gpus) as local:
        assert local.telemetry == "NVML, 1 GPU(s), sampled every 0.05 s"
        job = script_job(tmp_path, "slept", "import time\ntime.sleep(0.3)\n")
        result = local.run(job)
        assert result.telemetry is not None and result.telemetry["samples"] >= 3
        assert result.telemetry["gpus"][0]["memory_added_peak_mib"] == 2048.0
        private = local.run(replace(job, name="reference", private=True))
        assert private.ranks[0].status == "exit:0"
        assert sorted(p.name for p in (tmp_path / "runs").iterdir() if p.is_dir()) == ["shm", "tmp"]
        assert len([p for p in tmp_path.iterdir() if p.name.startswith("runs-trusted-")]) == 1
    assert gpus.closed
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("runs-trusted-")]


LOOKS_FOR_THE_GRADER = """
    import inspect, json, os, sys
    import torch.distributed as dist

    def found():
        return {
            "environment": [k for k, v in os.environ.items() if "grader" in (k + v).lower()],
            "modules": sorted(m for m in sys.modules if "grader" in m.lower()),
            "import path": [str(p) for p in (*sys.path, *sys.path_hooks, *sys.meta_path) if "grader" in (str(p) + type(p).__module__).lower()],
            "stack": [f"{f.filename}:{f.function}" for f in inspect.stack() if "grader" in (f.filename + f.function).lower()],
            "torch.distributed": [n for n in dir(dist) if "grader" in (getattr(getattr(dist, n), "__module__", "") or "").lower()],
            "process group": [type(dist.group.WORLD).__module__] if dist.is_initialized() and "grader" in type(dist.group.WORLD).__module__ else [],
        }

    before = found()
    dist.init_process_group("gloo")
    after = found()
    print(json.dumps({"before": before, "after": after, "backend": dist.get_backend()}))
    dist.destroy_process_group()
"""


@pytest.mark.parametrize("virtual_gpus", [0, 2])
def test_a_script_looking_for_the_grader_in_its_process_finds_nothing(runner: LocalRunner, tmp_path: Path, virtual_gpus: int) -> None:
    """Every rank runs the script as torchrun would run it: the grader's modules, import-path
    entries and frames are out of its way, and what it finds in torch's place (the process
    group, init_process_group) is named as torch's (grader/probe/cloak.py)."""
    import json

    from grader.probe.transport.traffic import CarrierPlan

    job = replace(script_job(tmp_path, f"spy{virtual_gpus}", LOOKS_FOR_THE_GRADER, Layout(1, 2)), carrier=CarrierPlan(30.0, 1 << 20), virtual_gpus=virtual_gpus)
    result = runner.run(job)
    for rank in result.ranks:
        seen = json.loads(rank.stdout_tail.strip().splitlines()[-1])
        assert seen["before"] == seen["after"] == {"environment": [], "modules": [], "import path": [], "stack": [], "torch.distributed": [], "process group": []}, seen
        assert seen["backend"] == "gloo"
    assert sorted(result.traffic.groups[0].joined) == [0, 1]  # carried all the same


def test_a_script_that_moves_master_port_waits_as_under_torchrun_and_is_told_why(runner: LocalRunner, tmp_path: Path) -> None:
    """Under torchrun (checked with torch 2.13) a script that sets MASTER_PORT itself hangs in
    init_process_group: its ranks are clients of a store nobody hosts there. So it does here,
    and the feedback says why."""
    from grader.checks import failures

    source = """
        import os, torch.distributed as dist
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "localhost", "12355"
        dist.init_process_group("gloo")
        """
    result = runner.run(script_job(tmp_path, "moved", source, Layout(1, 2), timeout_s=6))
    assert result.timed_out
    text = failures.explain(result)
    assert "rank 0 waits at main.py:4 in <module>: dist.init_process_group(\"gloo\")" in text and failures.RENDEZVOUS_HINT in text, text


SPIN = """
import os, time
def spin(seconds):
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        pass
"""


def test_the_kernel_tells_a_launchs_own_cpu_time_from_other_load(runner: LocalRunner, tmp_path: Path) -> None:
    """What other load took during a launch is read from the kernel: a rank that spins is its
    own work, however it hides it (a detached grandchild spins while the rank sleeps), and a
    busy process beside the grading is other load, which disturbs the launch."""
    import subprocess
    import sys

    own = runner.run(script_job(tmp_path, "spins", SPIN + "spin(0.6)\n"))
    hidden = runner.run(script_job(tmp_path, "hides", SPIN + "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        spin(0.6)\n    os._exit(0)\ntime.sleep(0.8)\n"))
    for result in (own, hidden):
        assert result.load is not None and result.load.job_cpu_s >= 0.5 and not result.load.disturbed, result.load
    beside = subprocess.Popen([sys.executable, "-c", SPIN + "spin(5)\n"])
    try:
        loaded = runner.run(script_job(tmp_path, "beside", SPIN + "spin(0.6)\n"))
    finally:
        beside.kill()
        beside.wait()
    assert loaded.load is not None and loaded.load.disturbed and loaded.load.others_share > 0.3 and loaded.load.job_cpu_s >= 0.5, loaded.load
