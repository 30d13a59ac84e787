"""`python -m grader observe -- CMD`: run a command unmodified and show what its processes did.

Modules:
    records   -- the recorded files read back: one ObservedProcess per process, one time axis.
                 The recording itself is the grader's one recorder (grader.probe.recorder.observers),
                 started in every process by grader/probe/boot/sitecustomize.py when
                 GRADER_OBSERVE_DIR is set; its events are defined in grader.probe.events.
    report    -- the terminal report (pure: records in, text out).
    timeline  -- the per-rank timeline as a PNG (matplotlib, imported there only).
    trace     -- the Chrome trace ("traceEvents"; opens in Perfetto and chrome://tracing).
    run       -- starts the command, collects its files, writes the pictures, makes the report.
"""
