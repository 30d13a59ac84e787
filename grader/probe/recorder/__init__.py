"""The recorder: what each process of a graded run (and of `grader observe`) records about
itself — its process group, DDP, each model call, backward passes, all-reduces, optimizer steps,
its variables and how it ended — for the grader to explain its verdicts with.

Modules:
    observers  -- the hooks that record (the one recorder, `Probe`).
    events     -- every event it writes, defined once; the grader reads them back with the same
                  definitions (grader.run.records).
    eventfile  -- the size-capped file the events go to.

What it writes is the submission's to change: it explains, it never decides a verdict.
"""
