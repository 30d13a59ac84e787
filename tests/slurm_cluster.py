"""A real, single-node Slurm cluster for the tests: munged, slurmctld and slurmd of Debian's
slurm-wlm, every file under one temporary folder, two CPUs and two fake GPUs (GRES backed by
/dev/null), started by the tests and stopped by process id. Its one node is in two partitions:
`grading` (the default) and `gpu` (the one a test names the course's GPU partition). Its MessageTimeout is 5 s, not
Slurm's 10: a command that finds no controller tries once a second for that long before it
gives up (sbatch: 4 s instead of 9 s, measured), which a test of a cluster that is down waits for."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

NEEDED = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol")


def missing_tools() -> list[str]:
    return [tool for tool in NEEDED if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists()]


def slurm_problem() -> str | None:
    """Why a test cluster cannot run here, or None."""
    missing = missing_tools()
    if missing:
        return f"{', '.join(missing)} not installed (on Debian: apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "the test cluster runs slurmd as root (it starts jobs as their owner)"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _tool(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


@dataclass
class SlurmCluster:
    root: Path
    cpus: int = 2
    gpus: int = 2
    node: str = field(default_factory=lambda: socket.gethostname().split(".")[0])
    processes: list[subprocess.Popen] = field(default_factory=list)
    logs: list = field(default_factory=list)  # the daemons' output files, closed by stop()

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """The environment in which Slurm's commands talk to this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def write_config(self) -> None:
        for folder in ("state", "spool", "munge", "log", "gpus"):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        (self.root / "munge").chmod(0o711)
        for index in range(self.gpus):
            link = self.root / "gpus" / f"gpu{index}"
            if not link.exists():
                link.symlink_to("/dev/null")
        r = self.root
        self.conf.write_text(
            f"""ClusterName=gradertest
SlurmctldHost={self.node}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
AuthInfo=socket={r}/munge/munge.socket
CredType=cred/munge
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={r}/log/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=sched_min_interval=0,batch_sched_delay=0
ReturnToService=2
MinJobAge=600
MessageTimeout=5
KillWait=2
InactiveLimit=0
GresTypes=gpu
NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory=4000 Gres=gpu:{self.gpus} State=UNKNOWN
PartitionName=grading Nodes={self.node} Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes={self.node} MaxTime=INFINITE State=UP
"""
        )
        files = ",".join(str(self.root / "gpus" / f"gpu{i}") for i in range(self.gpus))
        (self.root / "gres.conf").write_text(f"AutoDetect=off\nNodeName={self.node} Name=gpu File={self.root}/gpus/gpu[0-{self.gpus - 1}]\n" if self.gpus > 1 else f"AutoDetect=off\nNodeName={self.node} Name=gpu File={files}\n")

    def start(self, timeout_s: float = 30) -> None:
        self.write_config()
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        munge = self.root / "munge"
        try:
            self._spawn([_tool("munged"), "--foreground", "--force", f"--socket={munge}/munge.socket", f"--key-file={key}", f"--pid-file={munge}/munged.pid", f"--log-file={munge}/munged.log", f"--seed-file={munge}/munged.seed"])
            self._wait(lambda: (munge / "munge.socket").exists(), timeout_s, "munged")
            self._spawn([_tool("slurmctld"), "-D", "-i", "-f", str(self.conf)])
            self._spawn([_tool("slurmd"), "-D", "-N", self.node, "-f", str(self.conf)])
            self._wait(self._node_idle, timeout_s, "the node to be idle")
        except BaseException:
            self.stop()
            raise

    def _spawn(self, command: list[str]) -> None:
        log = open(self.root / "log" / f"{Path(command[0]).name}.out", "ab")  # noqa: SIM115 - closed by stop()
        self.logs.append(log)
        self.processes.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True))

    def _node_idle(self) -> bool:
        done = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, env=self.env)
        return done.returncode == 0 and done.stdout.strip().startswith("idle")

    def _wait(self, condition, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if condition():
                return
            dead = [p for p in self.processes if p.poll() is not None]
            if dead:
                break
            time.sleep(0.2)
        logs = "\n".join(f"{p.name}: {p.read_text(errors='replace')[-1500:]}" for p in sorted((self.root / "log").glob("*")))
        raise RuntimeError(f"the test Slurm cluster did not come up ({what}):\n{logs}")

    def stop(self) -> None:
        """Cancel every job (their processes go with them), then stop the daemons by pid."""
        if self.processes and all(p.poll() is None for p in self.processes):
            subprocess.run(["scancel", "--full", "-u", "root"], env=self.env, capture_output=True, timeout=60)
            time.sleep(1)
        for process in reversed(self.processes):
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        self.processes.clear()
        for log in self.logs:
            log.close()
        self.logs.clear()
