"""Autograder for the course "Parallelism in Deep Learning"."""

__version__ = "0.1.0"
