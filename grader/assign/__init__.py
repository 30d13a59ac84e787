"""Authoring: one source (the solutions, with markers) from which the student templates are
released (release.py), exported to students (export.py), and new practicals scaffolded
(scaffold.py)."""
