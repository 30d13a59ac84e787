"""Speed: what a user of the program pays, measured by the grader.

`measure`: the timing protocol over a timed run's launches, by clocks the submission cannot
touch, with what the kernel counted of other load. It reads what a run produced and imports
neither the checks, the practicals nor the grading pipeline: the launch policy (which runs,
rounds, pace, budget) is grader/grade/timing.py, the verdicts grader/checks/speed.py.
"""
