"""The probe: what runs inside a student's processes.

Everything in this subpackage executes in the rank processes next to untrusted code, so it
depends on nothing but the standard library and torch, imports nothing else from the grader,
and never decides a verdict: it records, carries and emulates; the grader judges on its side.

By role:
    zygote, rank  -- the launcher: a fork server that imports torch once, and one rank's process
                     (stdio, fault handler, the recorder, the script).
    recorder/     -- what each process records about itself (grader.probe.recorder).
    transport/    -- the ranks' process groups, carried by the grader's hub (grader.probe.transport).
    vgpu/         -- virtual GPUs (grader.probe.vgpu).
    cloak         -- nothing of the grader in a rank's modules, import path or stack.
    messages      -- the lines between the grader, the launcher and the ranks, defined once.
    typed         -- the strict JSON of records and messages; patching -- replacing torch's functions.
    drivers/, boot/ -- a notebook's graded cells; `grader run`'s start-up.
"""
