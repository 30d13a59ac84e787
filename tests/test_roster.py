"""`grader roster`: each student's bare repository made from a roster, with real git — seeded
with the student export, the hook `hook install` writes, pushes going through it, a longer
roster keeping what exists, a failed student leaving nothing behind, bad rosters refused."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from grader.course import load_course
from grader.store import ResultsStore
from grader.submit import roster
from grader.submit.reconcile import reconcile
from helpers import AS_ME, ROOT, git, run_cli

STUDENTS = ("alice", "bob", "carol")
# a spreadsheet's CSV: a byte order mark, extra columns, spaces around cells, a blank line
ROSTER = "\ufeffstudent, name ,email\n alice ,Alice A,alice@example.org\n\nbob,Bob B,bob@example.org\ncarol , Carol C ,\n"


def make(tmp_path: Path, text: str, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`grader roster` on a roster of `text` (p6's export: the smallest), repositories in
    tmp_path/repos, the store in tmp_path/results."""
    path = tmp_path / "roster.csv"
    path.write_text(text, encoding="utf-8")
    return run_cli("roster", str(path), "--repos", str(tmp_path / "repos"), "--results-dir", str(tmp_path / "results"), "--practicals", "p6", *AS_ME, *extra, env=env)


def files_of(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (but .git) by its relative path, with its bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file() and ".git" not in p.relative_to(folder).parts}


def test_a_roster_of_three_makes_three_bare_repositories_seeded_with_the_export_and_the_hook(tmp_path: Path) -> None:
    repos, results = tmp_path / "repos", tmp_path / "results"
    done = make(tmp_path, ROSTER)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:4] == [*(f"created {repos / f'{s}.git'}" for s in STUDENTS), "3 created, 0 kept, 0 failed; the export holds p6"]
    assert sorted(p.name for p in repos.iterdir()) == [f"{s}.git" for s in STUDENTS]  # no hidden folder left

    assert run_cli("export-student", "p6", "--out", str(tmp_path / "export")).returncode == 0
    expected = files_of(tmp_path / "export")
    heads = set()
    for student in STUDENTS:
        bare = repos / f"{student}.git"
        assert git("rev-parse", "--is-bare-repository", cwd=bare) == "true"
        assert git("symbolic-ref", "HEAD", cwd=bare) == "refs/heads/main"
        assert git("log", "--format=%an <%ae>|%s", "main", cwd=bare) == "Course staff <staff@course.invalid>|The course's starter repository"  # one commit
        assert sorted(git("ls-tree", "-r", "--name-only", "main", cwd=bare).splitlines()) == sorted(expected)
        heads.add(git("rev-parse", "main", cwd=bare))
        hook = bare / "hooks" / "post-receive"
        assert os.access(hook, os.X_OK) and f"--repo {bare.resolve()} " in hook.read_text() and f"--student {student} " in hook.read_text()
        assert json.loads((results / "repositories" / f"{student}.json").read_text())["repo"] == str(bare.resolve())
    assert len(heads) == 1  # one run: the same starter commit everywhere

    clone = tmp_path / "alice"
    git("clone", "-q", str(repos / "alice.git"), str(clone), cwd=tmp_path)
    assert files_of(clone) == expected  # byte for byte what export-student writes, its .gitignore'd names too
    assert git("ls-files", "-s", "scripts/setup.sh", cwd=clone).startswith("100755 ")

    # the hook is `hook install`'s own: installing it again by hand writes the same bytes
    hook = repos / "alice.git" / "hooks" / "post-receive"
    before = hook.read_bytes()
    installed = run_cli("hook", "install", str(repos / "alice.git"), "--results-dir", str(results), *AS_ME)
    assert installed.returncode == 0, installed.stderr
    assert hook.read_bytes() == before

    # the output ends with how to give push-only access: the clone URL and the authorized_keys line
    text = done.stdout[done.stdout.index("\n\n"):]
    assert f":{repos.resolve()}/<student>.git" in text
    assert f'restrict,command="case \\"$SSH_ORIGINAL_COMMAND\\" in git-receive-pack*) exec git-receive-pack {repos.resolve() / "alice.git"};; git-upload-pack*) exec git-upload-pack {repos.resolve() / "alice.git"};;' in text
    assert lines[-1].startswith("     and a push naming another student's path")


def test_the_forced_command_serves_only_the_students_own_repository(tmp_path: Path) -> None:
    """The authorized_keys command, run as sshd runs it (`sh -c`, the client's request in
    SSH_ORIGINAL_COMMAND): a clone asking for bob's path gets alice's repository; anything else
    is refused."""
    for student in ("alice", "bob"):
        git("init", "-q", "--bare", str(tmp_path / f"{student}.git"), cwd=tmp_path)
    alice = tmp_path / "alice.git"
    empty = git("hash-object", "-w", "-t", "tree", os.devnull, cwd=alice)
    git("update-ref", "refs/heads/main", git("commit-tree", "-m", "alice's", empty, cwd=alice), cwd=alice)
    line = roster.forced_command(alice).replace('\\"', '"')  # as sshd reads it
    assert str(alice) in line and "bob" not in line
    upload = subprocess.run(["sh", "-c", line], input="0000", capture_output=True, text=True, env={**os.environ, "SSH_ORIGINAL_COMMAND": f"git-upload-pack '{tmp_path / 'bob.git'}'"})
    assert upload.returncode == 0 and "refs/heads/main" in upload.stdout, upload.stderr  # alice's branch: bob's repository has none
    shell = subprocess.run(["sh", "-c", line], capture_output=True, text=True, env={**os.environ, "SSH_ORIGINAL_COMMAND": "cat /etc/passwd"})
    assert shell.returncode == 1 and shell.stderr.strip() == "this key may only git push and git fetch" and not shell.stdout


def test_a_push_goes_through_the_hook_and_a_longer_roster_keeps_every_existing_repository(tmp_path: Path) -> None:
    repos, results = tmp_path / "repos", tmp_path / "results"
    # Slurm as the backend with no sbatch on the hook's PATH: a push is queued and nothing grades
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "git").symlink_to(shutil.which("git") or "/usr/bin/git")
    env = {**os.environ, "PATH": str(tools)}
    assert make(tmp_path, ROSTER, "--backend", "slurm", env=env).returncode == 0
    assert reconcile(ResultsStore(results), load_course(ROOT)) == []  # the starter commit is nobody's submission

    clone = tmp_path / "alice"
    git("clone", "-q", str(repos / "alice.git"), str(clone), cwd=tmp_path)
    (clone / "notes.md").write_text("to do: read about NCCL\n")
    git("add", "notes.md", cwd=clone)
    git("commit", "-qm", "notes", cwd=clone)
    assert push(clone) == f"nothing to grade in {git('rev-parse', 'HEAD', cwd=clone)[:7]} (no practical's folder changed)"
    with open(clone / "assignments" / "p6" / "p6_ddp.py", "a") as handle:
        handle.write("# my DDP, soon\n")
    git("commit", "-qam", "p6 started", cwd=clone)
    pushed = git("rev-parse", "HEAD", cwd=clone)
    receipt = push(clone).splitlines()[0]
    assert receipt in (f"queued p6 @{pushed[:7]}: waiting (grading is down; it will be graded when it is back)", f"queued p6 @{pushed[:7]}: recorded; grading starts when the cluster answers"), receipt
    record = json.loads((results / "queue" / f"alice--p6--{pushed}.json").read_text())
    assert (record["student"], record["source"]["repo"], record["backend"]) == ("alice", str((repos / "alice.git").resolve()), "slurm")

    again = make(tmp_path, ROSTER + "dave,Dave D,dave@example.org\n", "--backend", "slurm", env=env)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[:5] == [
        f"created {repos / 'dave.git'}",
        *(f"kept    {repos / f'{s}.git'} (it exists: left as it is)" for s in STUDENTS),
        "1 created, 3 kept, 0 failed; the export holds p6",
    ]
    assert git("rev-parse", "main", cwd=repos / "alice.git") == pushed  # alice's work is untouched
    assert git("rev-list", "--count", "main", cwd=repos / "dave.git") == "1"
    assert sorted(p.name for p in repos.iterdir()) == [f"{s}.git" for s in (*STUDENTS, "dave")]


def push(clone: Path) -> str:
    """`git push` as the student sees it: what the remote said (git prints it on stderr)."""
    done = subprocess.run(["git", "push", "-q", "origin", "main"], cwd=clone, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return "\n".join(line.removeprefix("remote: ").strip() for line in done.stderr.splitlines() if line.startswith("remote:"))


def test_a_student_whose_repository_cannot_be_made_fails_alone_and_the_exit_status_says_so(tmp_path: Path) -> None:
    repos = tmp_path / "repos"
    repos.mkdir()
    (repos / "bob.git").write_text("not a repository\n")
    done = make(tmp_path, ROSTER)
    assert done.returncode == 1
    assert f"failed  bob: {repos / 'bob.git'} exists and is not a bare git repository: left as it is" in done.stderr
    assert "2 created, 0 kept, 1 failed; the export holds p6" in done.stdout
    assert (repos / "bob.git").read_text() == "not a repository\n"
    assert git("rev-list", "--count", "main", cwd=repos / "carol.git") == "1"


def test_a_failure_halfway_leaves_nothing_behind_and_restores_the_stores_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bob's repository fails after its hook and its record were written: no folder of his is
    left (hidden or not), his earlier record is back as it was, alice and carol get theirs."""
    repos, results = tmp_path / "repos", tmp_path / "results"
    earlier = results / "repositories" / "bob.json"
    earlier.parent.mkdir(parents=True)
    earlier.write_text('{"student": "bob", "repo": "/srv/git/old/bob.git"}\n')
    real = roster.hook.install

    def install(repo: Path, *args: object, **kwargs: object) -> Path:
        path = real(repo, *args, **kwargs)
        if kwargs["at"].name == "bob.git":
            raise OSError(28, "No space left on device")
        return path

    monkeypatch.setattr(roster.hook, "install", install)
    made = roster.create_repositories(load_course(ROOT), list(STUDENTS), repos, ["p6"], results)
    assert (made.created, made.kept) == (("alice", "carol"), ())
    assert made.failed == (("bob", "[Errno 28] No space left on device"),)
    assert sorted(p.name for p in repos.iterdir()) == ["alice.git", "carol.git"]
    assert earlier.read_text() == '{"student": "bob", "repo": "/srv/git/old/bob.git"}\n'
    assert sorted(p.name for p in earlier.parent.iterdir()) == ["alice.json", "bob.json", "carol.json"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("student,name\nalice,A\nbob,B\nalice,A again\n", "line 4: the student 'alice' again (first on line 2)"),
        ("student\nalice\n../x\n", "line 3: the student id '../x' holds a slash (it becomes a folder's name)"),
        ("", "it is empty: its first line must name the columns (a `student` column among them), then one student a line"),
        ("login,name\nalice,A\n", "line 1: the header has no `student` column (found: 'login', 'name'); the first line names the columns, e.g. student,name,email"),
    ],
    ids=["duplicate", "parent folder", "empty file", "missing column"],
)
def test_a_bad_roster_is_refused_naming_the_line_and_nothing_is_made(tmp_path: Path, text: str, message: str) -> None:
    done = make(tmp_path, text)
    assert done.returncode == 1
    assert done.stderr.startswith(f"error: {tmp_path / 'roster.csv'} is not a usable roster:\n  ") and f"\n  {message}\n" in done.stderr, done.stderr
    assert not (tmp_path / "repos").exists() and not (tmp_path / "results").exists()


@pytest.mark.parametrize(
    ("text", "problems"),
    [
        ("student\n.alice\n-bob\nc/d\nd\\e\n", ["line 2: the student id '.alice' starts with '.' (a hidden file or an option)", "line 3: the student id '-bob' starts with '-' (a hidden file or an option)", "line 4: the student id 'c/d' holds a slash (it becomes a folder's name)", "line 5: the student id 'd\\\\e' holds a slash (it becomes a folder's name)"]),
        ("student\na\x1bb\nx\u202ey\n" + "z" * 129 + "\n", ["line 2: the student id 'a\\x1bb' holds a control or invisible character ('\\x1b')", "line 3: the student id 'x\\u202ey' holds a control or invisible character ('\\u202e')", "line 4: the student id is 129 characters long (at most 128)"]),
        ("student\nqueue\nal ice\nélodie\na..b\n", ["line 2: the student id 'queue' is a name the results store keeps for itself", *(f"line {n}: the student id {v!r} may hold only letters, digits and . _ @ - (and no '..')" for n, v in ((3, "al ice"), (4, "élodie"), (5, "a..b")))]),
        ("name,student\nA,Alice\nB,\nC,alice\n", ["line 3: no student id", "line 4: the student 'alice' again (first on line 2)"]),
        ("student,name\n\n\n", ["no student in it, only the header"]),
        ("student,Student\nalice,A\n", ["line 1: the header names `student` twice (found: 'student', 'Student'); the first line names the columns, e.g. student,name,email"]),
    ],
    ids=["dots dashes slashes", "control and long", "store names", "empty and case duplicate", "header only", "two columns"],
)
def test_every_bad_line_is_named(tmp_path: Path, text: str, problems: list[str]) -> None:
    with pytest.raises(roster.RosterError) as refused:
        roster.parse_roster(text, tmp_path / "roster.csv")
    assert refused.value.problems == problems


def test_a_roster_that_is_not_utf8_is_refused_naming_the_line(tmp_path: Path) -> None:
    path = tmp_path / "roster.csv"
    path.write_bytes("student\nalice\n\u00e9lodie\n".encode("latin-1"))
    with pytest.raises(roster.RosterError) as refused:
        roster.read_roster(path)
    assert refused.value.problems == ["line 3: not UTF-8 text (save the file as CSV UTF-8)"]
    path.write_text("student , email\r\n  alice  , a@example.org\r\nbob\r\n")  # Windows line ends, a short row
    assert roster.read_roster(path) == ["alice", "bob"]


def test_roster_and_hook_install_refuse_root_unless_told(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """As root, `roster` and `hook install` would put the students' pushes into root's account
    and run the hook as root: both refuse (a user's mistake, exit 2) and say what to do, and
    make nothing; --allow-root makes them."""
    import grader.cli as cli

    monkeypatch.setattr(cli.os, "geteuid", lambda: 0)
    (tmp_path / "roster.csv").write_text(ROSTER, encoding="utf-8")
    repos, results = tmp_path / "repos", tmp_path / "results"
    for command in (["roster", str(tmp_path / "roster.csv"), "--repos", str(repos), "--practicals", "p6"], ["hook", "install", str(tmp_path / "alice.git")]):
        assert cli.main([*command, "--results-dir", str(results)]) == 2
        error = capsys.readouterr().err
        assert f"error: {' '.join(command[:2]) if command[0] == 'hook' else 'roster'} as root: the students' pushes would reach root's account" in error
        assert "Run it as a dedicated git account" in error and "or pass --allow-root if root is meant" in error
    assert not repos.exists() and not results.exists()
    assert cli.main(["roster", str(tmp_path / "roster.csv"), "--repos", str(repos), "--practicals", "p6", "--results-dir", str(results), "--allow-root"]) == 0
    assert sorted(p.name for p in repos.iterdir()) == [f"{s}.git" for s in STUDENTS]
