"""A deadline burst through the real submission path (issue 34): students push their
practicals in the last minutes before a deadline, every push reaches a graded result and the
student's feedback branch. A benchmark, not a test: it needs root, bubblewrap and Debian's
slurm-wlm and munge (as tests/test_slurm.py), and prints its figures.

    python bench/bench_burst.py [--students 300] [--practicals 4] [--minutes 10] [--grading-s 30]
                                [--node-cpus 256] [--node-gpus 128] [--gpus 2] [--pushers 32]
    python bench/bench_burst.py --students 20 --practicals 2 --minutes 1 --grading-s 2   # a quick try

What is real: a bare git repository per student holding the course's templates with the
grader's post-receive hook (`hook.install`, the hook `python -m grader hook receive`), a clone
per student whose commits are pushed with `git push` (up to `--pushers` git processes at
once, paced evenly over the minutes in a shuffled order; a student's own pushes one after
another; a push that falls behind its time starts as soon as a pusher is free), the queue
(grader/submit/queue.py), the pushes' detached `python -m grader dispatch --coalesce`, a
one-node Slurm cluster (tests/slurm_cluster.py: slurmctld, slurmd, munged) taking one `sbatch`
job per submission, the job's `python -m grader work` (the node's sandbox check, the commit
taken out of git, the result stored, the feedback committed to the student's repository), and
a cron-like `python -m grader dispatch` every `--cron-s` (admins.md's cron line).

What is not: the grading itself. Each job's worker sleeps `--grading-s` instead (a stand-in,
$GRADER_BENCH_STAND_IN_S: grader/submit/worker.py's `stand_in_report`, every check failed
with zero points), so a one-node cluster on a 2-core machine can run many at once. The node is
oversubscribed for that: it claims `--node-cpus` CPUs and `--node-gpus` GPUs (GRES backed by
/dev/null, Slurm's `config_overrides`), and each job asks what production asks (the spec's
CPUs, cut to the node; `--gpus` GPUs), so `min(node_cpus / cpus, node_gpus / gpus)` gradings
run at once.

Measured per push: how long `git push` took (the hook's receipt included); the dispatch
overhead (the push until Slurm took the job: its SubmitTime); the queue wait (the push until
the job started: its StartTime); push-to-result (the result file's mtime) and push-to-feedback
(the first poll, every 0.5 s, that finds `<practical>/<commit>.md` on the repository's
feedback branch). Slurm's times have 1-second resolution. Every push must end with exactly one
result and one feedback file and one Slurm job (lost / duplicated: 0; a result for a commit
nobody pushed counts as duplicated). The N-node table is the paper model (`Model`): a real
grading's wall time and CPU-seconds (`--model-grading-s`, `--model-cpu-s`), a node's gradings
at once from its GPUs (`--gpus-per-node` / `--gpus`), the burst's arrival rate. Everything the
run started (the cluster's daemons by pid; the dispatchers and jobs by their command lines,
which name the run's own folder) is ended at the end, also on failure.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from grader.course import Course, load_course  # noqa: E402
from grader.submit import hook  # noqa: E402
from grader.submit.dispatch import job_size  # noqa: E402
from grader.submit.worker import STAND_IN  # noqa: E402
from slurm_cluster import SlurmCluster, slurm_problem  # noqa: E402

PYTHON = sys.executable
PRACTICALS = ("p6", "p10", "p4", "p5")  # the order --practicals K takes them in


class BurstCluster(SlurmCluster):
    """The tests' one-node cluster, claiming more CPUs and GPUs than the machine has
    (`config_overrides`): the stand-in gradings sleep, so many share its cores."""

    def write_config(self) -> None:
        super().write_config()
        with open(self.conf, "a", encoding="utf-8") as conf:
            conf.write("SlurmdParameters=config_overrides\nMaxJobCount=100000\n")


@dataclass
class Push:
    """One scheduled push: a student's commit that changes one practical's folder."""

    student: str
    practical: str
    commit: str
    at: float  # seconds after the burst's start
    started: float = 0.0  # epoch seconds
    ended: float = 0.0
    ok: bool = False
    receipt: str = ""


@dataclass
class Feedback:
    """The first time each `<practical>/<commit>.md` was seen on a feedback branch."""

    seen: dict = field(default_factory=dict)  # (student, practical, commit) -> epoch seconds
    lock: threading.Lock = field(default_factory=threading.Lock)


def git(*args: str, cwd: Path | None = None, env: dict | None = None) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=env, check=True)
    return done.stdout.strip()


def git_env() -> dict[str, str]:
    """An environment for the bench's own git commands (no user config needed)."""
    return {**os.environ, "GIT_AUTHOR_NAME": "student", "GIT_AUTHOR_EMAIL": "s@example.org", "GIT_COMMITTER_NAME": "student", "GIT_COMMITTER_EMAIL": "s@example.org", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}


def make_students(folder: Path, results: Path, course: Course, students: int, practicals: tuple[str, ...], options: dict, workers: int = 4) -> dict[str, list[str]]:
    """A bare repository with the installed hook and a clone per student, with one commit per
    practical prepared in the clone (not pushed); student -> the commits, in push order."""
    env = git_env()
    seed = folder / "seed"
    shutil.copytree(ROOT / "assignments", seed / "assignments")
    git("init", "-q", "-b", "main", cwd=seed, env=env)
    git("add", "-A", cwd=seed, env=env)
    git("commit", "-qm", "the course's templates", cwd=seed, env=env)

    def one(index: int) -> tuple[str, list[str]]:
        student = f"s{index:03d}"
        bare = folder / "git" / f"{student}.git"
        git("clone", "-q", "--bare", str(seed), str(bare), env=env)
        hook.install(bare, results, "slurm", options, course.root, student)
        clone = folder / "clones" / student
        git("clone", "-q", str(bare), str(clone), env=env)
        commits = []
        for practical in random.Random(index).sample(practicals, len(practicals)):
            (clone / "assignments" / practical / "BURST.md").write_text(f"{student}'s work on {practical}\n")
            git("add", "-A", cwd=clone, env=env)
            git("commit", "-qm", f"{practical} done", cwd=clone, env=env)
            commits.append(git("rev-parse", "HEAD", cwd=clone, env=env))
        return student, commits

    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        return dict(pool.map(one, range(students)))


def schedule(commits: dict[str, list[str]], clones: Path, minutes: float, seed: int = 34) -> list[Push]:
    """Every commit's push, evenly over `minutes`, students interleaved at random; each
    student's pushes in their commits' order."""
    slots = [(student, n) for student, chain in commits.items() for n in range(len(chain))]
    random.Random(seed).shuffle(slots)
    span = minutes * 60
    order: dict[str, int] = {}
    pushes = []
    for index, (student, _) in enumerate(slots):
        n = order.get(student, 0)
        order[student] = n + 1
        commit = commits[student][n]
        practical = git("diff-tree", "--no-commit-id", "--name-only", "-r", commit, cwd=clones / student).split("/")[1]
        pushes.append(Push(student, practical, commit, at=span * index / max(len(slots), 1)))
    return pushes


def push_all(pushes: list[Push], clones: Path, env: dict, pushers: int, start: float) -> None:
    """Push each on time, or as soon as a pusher is free and the student's previous push has
    ended (a student pushes one at a time); pushes are handed out in time order."""
    ended = [threading.Event() for _ in pushes]
    last: dict[str, int] = {}
    before: list[int | None] = []
    for index, item in enumerate(pushes):
        before.append(last.get(item.student))
        last[item.student] = index

    def one(index: int) -> None:
        item = pushes[index]
        try:
            if before[index] is not None:
                ended[before[index]].wait()
            delay = start + item.at - time.time()
            if delay > 0:
                time.sleep(delay)
            item.started = time.time()
            done = subprocess.run(["git", "push", "-q", "origin", f"{item.commit}:refs/heads/main"], cwd=clones / item.student, capture_output=True, text=True, env=env, timeout=300)
            item.ended = time.time()
            item.ok = done.returncode == 0
            item.receipt = " | ".join(line.removeprefix("remote: ").strip() for line in done.stderr.splitlines() if line.strip())
        except subprocess.TimeoutExpired:
            item.ended, item.receipt = time.time(), "git push timed out (300 s)"
        finally:
            ended[index].set()

    with concurrent.futures.ThreadPoolExecutor(pushers) as pool:
        list(pool.map(one, range(len(pushes))))


def watch_feedback(repos: Path, students: list[str], feedback: Feedback, stop: threading.Event, poll_s: float = 0.5) -> None:
    """Until `stop`: each repository's feedback branch, read again whenever its ref changes;
    the first time each graded commit's file appears is recorded."""
    seen_ref: dict[str, tuple[int, int]] = {}
    while not stop.is_set():
        for student in students:
            bare = repos / f"{student}.git"
            try:
                info = (bare / "refs" / "heads" / "feedback").stat()
                mark = (info.st_mtime_ns, info.st_ino)
            except FileNotFoundError:
                continue
            if seen_ref.get(student) == mark:
                continue
            seen_ref[student] = mark
            done = subprocess.run(["git", "--git-dir", str(bare), "ls-tree", "-r", "--name-only", "refs/heads/feedback"], capture_output=True, text=True)
            now = time.time()
            with feedback.lock:
                for name in done.stdout.split():
                    parts = name.removesuffix(".md").split("/")
                    if len(parts) == 2:
                        feedback.seen.setdefault((student, parts[0], parts[1]), now)
        stop.wait(poll_s)


def cron(results: Path, env: dict, every_s: float, stop: threading.Event, log: Path) -> None:
    """admins.md's cron line: `grader dispatch` every `every_s` seconds until `stop`."""
    with open(log, "ab") as out:
        while not stop.wait(every_s):
            subprocess.run([PYTHON, "-m", "grader", "--course-root", str(ROOT), "dispatch", "--results-dir", str(results), "--backend", "slurm"], stdout=out, stderr=subprocess.STDOUT, env=env, timeout=600, check=False)


def slurm_jobs(jobcomp: Path) -> dict[str, list[dict]]:
    """The job-completion log: job name -> its jobs' fields (a name per submission)."""
    jobs: dict[str, list[dict]] = {}
    for line in jobcomp.read_text(errors="replace").splitlines() if jobcomp.exists() else []:
        fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
        jobs.setdefault(fields.get("Name", ""), []).append(fields)
    return jobs


def epoch(stamp: str) -> float | None:
    """A Slurm time (local, to the second) as epoch seconds."""
    try:
        return datetime.datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return None


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank); nan for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def own_processes(marker: str) -> list[int]:
    """Processes whose command line names `marker` (this run's own temporary folder): the
    detached dispatchers and grading jobs it caused."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in command:
            found.append(int(entry.name))
    return found


def end_own_processes(marker: str) -> int:
    """SIGKILL each of this run's leftover processes, by pid; how many."""
    pids = own_processes(marker)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return len(pids)


@dataclass(frozen=True)
class Model:
    """The paper model of a deadline burst on N nodes: `pushes` arrive evenly over `minutes`;
    a node runs `slots_per_node` gradings at once (its GPUs / a job's GPUs); a job holds its
    slot for the grading (`grading_s`) and the worker's own work around it (`worker_s`: the
    node's sandbox check, the commit taken out of git, the result stored, the feedback
    committed); `dispatch_s` is a push's way to its job's start when nothing waits (the hook,
    the dispatcher's pass, sbatch, Slurm's scheduling). Arrivals beyond the cluster's rate wait
    in Slurm's queue."""

    pushes: int
    minutes: float
    grading_s: float
    slots_per_node: int
    dispatch_s: float
    worker_s: float

    def row(self, nodes: int) -> dict:
        """The figures for `nodes` nodes. The k-th push (k = 0 … n-1) arrives at k/λ and its
        job starts at dispatch_s + max(k/λ, k/μ) (λ: pushes a second; μ = slots / (grading_s +
        worker_s): jobs a second the cluster finishes; exact for arrivals all at once, within
        one job's length otherwise); its feedback comes one job later."""
        n, job = self.pushes, self.grading_s + self.worker_s
        slots = nodes * self.slots_per_node
        mu, lam = slots / job, n / (self.minutes * 60)
        k95 = math.ceil(0.95 * n) - 1
        p95 = self.dispatch_s + max(0.0, k95 / mu - k95 / lam) + job
        last = self.dispatch_s + max((n - 1) / lam, (n - 1) / mu) + job
        return {"nodes": nodes, "slots": slots, "rate_per_min": mu * 60, "keeps_up": mu >= lam, "after_last_min": (last - (n - 1) / lam) / 60, "last_min": last / 60, "p95_min": p95 / 60}


def model_table(model: Model, cpu_s: float, nodes: tuple[int, ...] = (1, 4, 8, 16)) -> str:
    """The N-node model as a markdown table; `cpu_s`: a grading's CPU-seconds."""
    lines = [
        f"{model.pushes} pushes over {model.minutes:g} min ({model.pushes / model.minutes:g} a minute); a grading {model.grading_s:g} s of wall time and {cpu_s:g} CPU-s, {model.worker_s:g} s of the worker's own around it; {model.slots_per_node} gradings at once per node; {model.dispatch_s:g} s from a push to its job's start when nothing waits",
        "",
        "| nodes | gradings at once | graded a minute | keeps up | push-to-feedback p95 | last feedback after the last push | cores busy grading, all nodes |",
        "|---|---|---|---|---|---|---|",
    ]
    for n in nodes:
        row = model.row(n)
        cores = min(row["slots"], model.pushes / (model.minutes * 60) * (model.grading_s + model.worker_s)) * cpu_s / model.grading_s
        lines.append(f"| {n} | {row['slots']} | {row['rate_per_min']:.0f} | {'yes' if row['keeps_up'] else 'no'} | {row['p95_min'] * 60:.0f} s ({row['p95_min']:.1f} min) | {row['after_last_min']:.1f} min | {cores:.0f} |")
    return "\n".join(lines)


def cpu_ticks() -> tuple[int, int]:
    """The machine's busy and total CPU time so far, in clock ticks (/proc/stat)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


def measure(pushes: list[Push], results: Path, jobs: dict[str, list[dict]], feedback: Feedback) -> dict:
    """Per push: its job, result and feedback; what was lost or duplicated; the latencies."""
    figures: dict[str, list[float]] = {"push": [], "overhead": [], "wait": [], "slurm_wait": [], "job": [], "result": [], "feedback": []}
    lost, duplicated, failed_pushes, not_completed, pending = [], [], [], [], []
    for item in pushes:
        if not item.ok:
            failed_pushes.append(f"{item.student} {item.practical}: {item.receipt[:200]}")
        figures["push"].append(item.ended - item.started)
        name = f"grade-{item.practical}-{item.student}-{item.commit[:7]}"
        own = jobs.get(name, [])
        stored = results / item.student / item.practical / f"{item.commit}.json"
        seen = feedback.seen.get((item.student, item.practical, item.commit))
        if not stored.exists() or seen is None or not own:
            if (results / "queue" / f"{item.student}--{item.practical}--{item.commit}.json").exists():
                pending.append(f"{item.student} {item.practical} @{item.commit[:7]}: still queued (jobs {len(own)})")
                continue
            lost.append(f"{item.student} {item.practical} @{item.commit[:7]}: result {stored.exists()}, feedback {seen is not None}, jobs {len(own)}")
            continue
        if len(own) > 1:
            duplicated.append(f"{name}: {len(own)} jobs")
        if any(job.get("JobState") != "COMPLETED" for job in own):
            not_completed.append(f"{name}: {[job.get('JobState') for job in own]}")
        job = own[0]
        submitted, began, finished = (epoch(job.get(key, "")) for key in ("SubmitTime", "StartTime", "EndTime"))
        if submitted is not None:
            figures["overhead"].append(submitted - item.started)
        if began is not None:
            figures["wait"].append(began - item.started)
            if submitted is not None:
                figures["slurm_wait"].append(began - submitted)
            if finished is not None:
                figures["job"].append(finished - began)
        figures["result"].append(stored.stat().st_mtime - item.started)
        figures["feedback"].append(seen - item.started)
    graded = {(p.parent.parent.name, p.parent.name, p.stem) for p in results.glob("s*/*/*.json")}
    extra = graded - {(p.student, p.practical, p.commit) for p in pushes}
    documents = [json.loads((results / s / pr / f"{c}.json").read_text()) for s, pr, c in graded]
    attempts = [d["extra_data"]["provenance"]["attempt"] for d in documents]
    return {"figures": figures, "lost": lost, "duplicated": duplicated + [f"a result nobody pushed: {e}" for e in sorted(extra)], "failed_pushes": failed_pushes, "not_completed": not_completed, "pending": pending,
            "results": len(graded), "retried": sum(a > 1 for a in attempts), "stand_in": sum("stand-in grading" in json.dumps(d) for d in documents), "jobs": sum(len(v) for k, v in jobs.items() if k.startswith("grade-"))}


def receipts(pushes: list[Push]) -> str:
    """What the pushes' receipts said, counted (`queued p6 @abc1234: started as job 42`)."""
    counts: dict[str, int] = {}
    for item in pushes:
        said = next((part.split(": ", 1)[1] for part in item.receipt.split(" | ") if part.startswith("queued ") and ": " in part), item.receipt[:80] or "nothing")
        said = "started as job N" if said.startswith("started as job") else said
        counts[said] = counts.get(said, 0) + 1
    return "; ".join(f"{n} × `{what}`" for what, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def report(args: argparse.Namespace, pushes: list[Push], outcome: dict, timing: dict, slots: int, sizes: dict) -> str:
    """The figures as text (markdown tables)."""
    f = outcome["figures"]
    span = max(p.started for p in pushes) - min(p.started for p in pushes)
    lag = [p.started - (timing["start"] + p.at) for p in pushes]
    rows = [
        ("git push (the hook's receipt included)", f["push"]),
        ("dispatch overhead: push → Slurm has the job (SubmitTime)", f["overhead"]),
        ("Slurm's own queue: SubmitTime → StartTime", f["slurm_wait"]),
        ("queue wait: push → grading starts (StartTime)", f["wait"]),
        ("job: StartTime → EndTime (the stand-in's sleep + the worker)", f["job"]),
        ("push → result stored", f["result"]),
        ("push → feedback on the student's branch", f["feedback"]),
    ]
    lines = [
        f"{args.students} students × {args.practicals} practicals = {len(pushes)} pushes over {args.minutes:g} min (pushed in {span / 60:.1f} min; a push's start behind its schedule: p50 {percentile(lag, 50):.1f} s, max {max(lag):.1f} s); stand-in gradings of {args.grading_s:g} s; one node claiming {args.node_cpus} CPUs and {args.node_gpus} GPUs, each job asking {', '.join(f'{p} {c} CPUs' for p, c in sizes.items())} and {args.gpus} GPUs: {slots} gradings at once",
        "",
        f"- pushes made: {len(pushes)} ({len(outcome['failed_pushes'])} failed); results stored: {outcome['results']} (stand-ins: {outcome['stand_in']}); Slurm jobs: {outcome['jobs']}; retried: {outcome['retried']}",
        f"- **lost: {len(outcome['lost'])}; duplicated: {len(outcome['duplicated'])}**; still queued when the bench stopped waiting: {len(outcome['pending'])}; jobs not COMPLETED: {len(outcome['not_completed'])}",
        f"- the receipts: {receipts(pushes)}",
        f"- last feedback {timing['drained'] / 60:.1f} min after the first push ({(timing['drained'] - span) / 60:.1f} min after the last); the machine's CPUs {timing['busy']:.0%} busy from the first push to the last feedback (other work included)",
        "",
        "| from push to … | p50 | p95 | max |",
        "|---|---|---|---|",
    ]
    lines += [f"| {what} | {percentile(v, 50):.1f} s | {percentile(v, 95):.1f} s | {max(v, default=math.nan):.1f} s |" for what, v in rows]
    for title, items in (("lost", outcome["lost"]), ("duplicated", outcome["duplicated"]), ("failed pushes", outcome["failed_pushes"]), ("not completed", outcome["not_completed"]), ("still queued", outcome["pending"])):
        if items:
            lines += ["", f"{title} ({len(items)}):", *[f"- {item}" for item in items[:20]]]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=300)
    parser.add_argument("--practicals", type=int, default=4, choices=range(1, len(PRACTICALS) + 1))
    parser.add_argument("--minutes", type=float, default=10, help="the burst's length: pushes evenly over it")
    parser.add_argument("--grading-s", type=float, default=30, help="the stand-in grading's sleep (a real grading's wall time)")
    parser.add_argument("--node-cpus", type=int, default=256, help="CPUs the one node claims (oversubscribed)")
    parser.add_argument("--node-gpus", type=int, default=128, help="GPUs the one node claims (GRES on /dev/null)")
    parser.add_argument("--gpus", type=int, default=2, help="GPUs each job asks (admins.md's `--gpus 2`)")
    parser.add_argument("--pushers", type=int, default=32, help="concurrent git pushes at most")
    parser.add_argument("--cron-s", type=float, default=300, help="the cron dispatcher's period")
    parser.add_argument("--drain-timeout-min", type=float, default=30)
    parser.add_argument("--model-grading-s", type=float, default=30, help="a real grading's wall time, for the paper model")
    parser.add_argument("--model-cpu-s", type=float, default=36, help="a real grading's CPU-seconds, for the paper model (p6: 27.3 CPU-s in 22.5 s, bench/RESULTS.md)")
    parser.add_argument("--gpus-per-node", type=int, default=8, help="the paper model's nodes")
    parser.add_argument("--model-dispatch-s", type=float, default=5, help="the paper model's push to job start when nothing waits")
    parser.add_argument("--model-worker-s", type=float, default=3, help="the paper model's worker's own time around a grading")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    problem = slurm_problem()
    if problem:
        print(f"cannot run: {problem}", file=sys.stderr)
        return 2
    folder = Path(tempfile.mkdtemp(prefix="bench-burst-", dir="/var/tmp"))
    folder.chmod(0o755)
    results = folder / "results"
    cluster = BurstCluster(folder / "slurm", cpus=args.node_cpus, gpus=args.node_gpus)
    stop = threading.Event()
    threads: list[threading.Thread] = []
    try:
        cluster.start()
        # PYTHONPATH: the hook, the dispatchers and the jobs run this checkout's grader
        env = {**cluster.env, STAND_IN: str(args.grading_s), "PYTHONPATH": str(ROOT), **{k: v for k, v in git_env().items() if k.startswith("GIT_")}}
        os.environ["SLURM_CONF"] = str(cluster.conf)  # hook.install writes it into each hook
        course = load_course(ROOT)
        practicals = PRACTICALS[: args.practicals]
        sizes = {p: min(job_size(course, p).cpus, args.node_cpus) for p in practicals}
        slots = min(args.node_cpus // max(sizes.values()), args.node_gpus // max(args.gpus, 1))
        began = time.monotonic()
        commits = make_students(folder, results, course, args.students, practicals, {"gpus": args.gpus})
        pushes = schedule(commits, folder / "clones", args.minutes)
        print(f"set up {args.students} repositories and {len(pushes)} commits in {time.monotonic() - began:.0f} s; pushing over {args.minutes:g} min", flush=True)
        feedback = Feedback()
        threads = [threading.Thread(target=watch_feedback, args=(folder / "git", list(commits), feedback, stop), daemon=True),
                   threading.Thread(target=cron, args=(results, {**cluster.env, STAND_IN: str(args.grading_s), "PYTHONPATH": str(ROOT)}, args.cron_s, stop, folder / "cron.log"), daemon=True)]
        for thread in threads:
            thread.start()
        busy0, total0 = cpu_ticks()
        start = time.time() + 1
        push_all(pushes, folder / "clones", env, args.pushers, start)
        print(f"pushed {len(pushes)} in {(time.time() - start) / 60:.1f} min; waiting for the results", flush=True)
        deadline = time.time() + args.drain_timeout_min * 60
        wanted = {(p.student, p.practical, p.commit) for p in pushes}
        while time.time() < deadline:
            with feedback.lock:
                have = wanted & set(feedback.seen)
            if len(have) == len(wanted):
                break
            time.sleep(1)
        drained = max(feedback.seen.values(), default=time.time()) - min(p.started for p in pushes)
        busy1, total1 = cpu_ticks()
        time.sleep(3)  # a job's line in the completion log comes a moment after its end
        outcome = measure(pushes, results, slurm_jobs(cluster.root / "log" / "jobcomp.txt"), feedback)
        timing = {"start": start, "drained": drained, "busy": (busy1 - busy0) / max(total1 - total0, 1)}
        print()
        print(report(args, pushes, outcome, timing, slots, sizes))
        model = Model(len(pushes), args.minutes, args.model_grading_s, args.gpus_per_node // max(args.gpus, 1), args.model_dispatch_s, args.model_worker_s)
        print()
        print(model_table(model, args.model_cpu_s))
        return 0 if not outcome["lost"] and not outcome["duplicated"] else 1
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        cluster.stop()
        ended = end_own_processes(str(folder))
        if ended:
            print(f"ended {ended} leftover process(es) of this run")
        if args.keep:
            print(f"kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
