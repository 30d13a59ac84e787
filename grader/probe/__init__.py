"""The probe: what runs inside a student's processes.

Everything in this subpackage executes in the rank processes next to untrusted code, so it
depends on nothing but the standard library and torch, imports nothing else from the grader,
and never decides a verdict: it only writes observations (JSON lines) that the grader reads
and judges on its own side.

Modules:
    zygote     -- a fork server: imports torch once, then forks every rank of every job.
    rank       -- runs one rank: stdio, fault handler, observers, the student's script.
    observers  -- the hooks that record process groups, DDP, forwards, all-reduces and steps.
    recorder   -- the size-capped JSON-lines writer the observers share.
"""
