"""Speed: what a user of the program pays, measured by the grader.

- `schedule`: which runs are timed, and their launches, round by round, interleaved with the
  reference solution's (grader/grade/pipeline.py makes them);
- `measure`: the timing protocol over those launches, by clocks the submission cannot touch;
- `verdicts`: the speed checks (`efficiency`, `scaling`, `faster_than`) over the measurements.
"""
