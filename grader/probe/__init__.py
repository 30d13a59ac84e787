"""The probe: what runs inside a student's processes.

Everything in this subpackage executes in the rank processes next to untrusted code, so it
depends on nothing but the standard library and torch, imports nothing else from the grader,
and never decides a verdict: it only writes observations (JSON lines) that the grader reads
and judges on its own side.

Modules:
    zygote     -- a fork server: imports torch once, then forks every rank of every job.
    rank       -- runs one rank: stdio, fault handler, the recorder, the student's script.
    observers  -- the recorder: the hooks that record process groups, DDP, forwards,
                  all-reduces and steps.
    events     -- every event it writes, defined once (standard library only); the grader
                  reads the files back with the same definitions (grader.run.records).
    recorder   -- the size-capped event file.
"""
