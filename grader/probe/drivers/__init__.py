"""Drivers: grader-written entry points that run a practical's student code (e.g. a
notebook's graded cells) inside the student's process and exercise it with the grader's
inputs. They record through the probe's recorder and decide nothing."""
