"""Trees the submission controls, handled by the grader: copies that follow no link and take
no hard link, depth and size caps without recursion, reads beneath a folder, removal at any
depth."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from grader.run.safeio import UntrustedFileError, read_beneath, read_untrusted
from grader.run.tree import TreeLimits, TreeRefused, copy_tree, empty_folder, open_beneath, remove_tree
from helpers import make_deep_tree


def test_a_copy_keeps_folders_files_modes_and_links_as_links(tmp_path: Path) -> None:
    source = tmp_path / "submission"
    (source / "pkg").mkdir(parents=True)
    (source / "main.py").write_text("print('hi')\n")
    (source / "run.sh").write_text("#!/bin/sh\n")
    (source / "run.sh").chmod(0o755)
    (source / "pkg" / "util.py").write_text("x = 1\n")
    (source / "shadow").symlink_to("/etc/shadow")
    (source / "etc").symlink_to("/etc")
    (source / ".git").mkdir()
    (source / ".git" / "HEAD").write_text("ref")
    notes = copy_tree(source, tmp_path / "work")
    work = tmp_path / "work"
    assert notes == ()
    assert (work / "main.py").read_text() == "print('hi')\n" and (work / "pkg" / "util.py").read_text() == "x = 1\n"
    assert os.stat(work / "run.sh").st_mode & 0o111 and not os.stat(work / "main.py").st_mode & 0o111
    assert os.readlink(work / "shadow") == "/etc/shadow" and os.readlink(work / "etc") == "/etc"
    assert not (work / ".git").exists()


def test_hard_links_fifos_and_sockets_are_left_out_with_a_note(tmp_path: Path) -> None:
    source = tmp_path / "submission"
    source.mkdir()
    secret = tmp_path / "root-only"
    secret.write_text("TOP SECRET")
    os.link(secret, source / "answers.yaml")
    os.mkfifo(source / "pipe")
    (source / "main.py").write_text("ok\n")
    notes = copy_tree(source, tmp_path / "work")
    assert sorted(os.listdir(tmp_path / "work")) == ["main.py"]
    assert "answers.yaml is a hard link (the file has 2 names) and was left out: submit the file itself" in notes
    assert "pipe is a FIFO and was left out" in notes
    with pytest.raises(UntrustedFileError, match="hard link"):
        read_untrusted(source / "answers.yaml", 100)


@pytest.mark.skipif(os.geteuid() != 0, reason="handing files over needs root")
def test_everything_copied_belongs_to_the_owner_and_no_link_target_changes_hands(tmp_path: Path) -> None:
    source = tmp_path / "submission"
    (source / "sub").mkdir(parents=True)
    (source / "sub" / "a.py").write_text("a")
    target = tmp_path / "outside"
    target.write_text("root's")
    (source / "link").symlink_to(target)
    before = os.stat(target)
    copy_tree(source, tmp_path / "work", owner=61999)
    for path in (tmp_path / "work", tmp_path / "work" / "sub", tmp_path / "work" / "sub" / "a.py"):
        assert os.stat(path).st_uid == 61999
    assert os.lstat(tmp_path / "work" / "link").st_uid == 61999
    assert os.stat(target).st_uid == before.st_uid and os.stat(target).st_mode == before.st_mode


def test_deep_trees_are_refused_and_removed_without_recursion(tmp_path: Path) -> None:
    source = tmp_path / "submission"
    source.mkdir()
    make_deep_tree(source, sys.getrecursionlimit() + 200)
    with pytest.raises(TreeRefused, match="nested more than 32 levels deep"):
        copy_tree(source, tmp_path / "work")
    remove_tree(source, tmp_path / "work")
    assert not source.exists() and not (tmp_path / "work").exists()


def test_size_and_entry_caps(tmp_path: Path) -> None:
    source = tmp_path / "submission"
    source.mkdir()
    (source / "big.bin").write_bytes(b"x" * 2048)
    with pytest.raises(TreeRefused, match="more than 0 MiB"):
        copy_tree(source, tmp_path / "a", limits=TreeLimits(max_bytes=1024))
    for index in range(5):
        (source / f"f{index}").write_text("")
    with pytest.raises(TreeRefused, match="more than 3 files and folders"):
        copy_tree(source, tmp_path / "b", limits=TreeLimits(max_entries=3))


def test_reads_beneath_a_folder_refuse_links_on_the_way(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "pkg").mkdir(parents=True)
    (work / "pkg" / "mod.py").write_text("line one\n")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "mod.py").write_text("not the student's\n")
    (work / "swapped").symlink_to(tmp_path / "elsewhere")
    assert read_beneath(work, "pkg/mod.py", 100) == (b"line one\n", False)
    with pytest.raises(UntrustedFileError, match="through a symbolic link"):
        read_beneath(work, "swapped/mod.py", 100)
    with pytest.raises(PermissionError):
        open_beneath(work, "../elsewhere/mod.py")


def test_empty_folder_keeps_the_folder(tmp_path: Path) -> None:
    folder = tmp_path / "tmp"
    (folder / "a" / "b").mkdir(parents=True)
    (folder / "f").write_text("x")
    (folder / "link").symlink_to(tmp_path)
    empty_folder(folder)
    assert folder.is_dir() and os.listdir(folder) == [] and tmp_path.exists()


def test_a_folder_of_thousands_of_long_names_is_emptied(tmp_path: Path) -> None:
    folder = tmp_path / "tmp"
    folder.mkdir()
    for index in range(12_000):  # 2.5 MB of names: more than one command line holds (ARG_MAX is 2 MiB here)
        (folder / f"{index:05d}{'n' * 200}").write_text("")
    empty_folder(folder)
    assert folder.is_dir() and os.listdir(folder) == []
    many = [tmp_path / f"{index:04d}{'m' * 200}" for index in range(1200)]
    for path in many:
        path.mkdir()
    remove_tree(*many)
    assert not any(path.exists() for path in many)
