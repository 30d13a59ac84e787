"""Checks: pure functions from what the grader observed to a verdict."""
