"""Grading: the pipeline from a submission folder to a report."""
