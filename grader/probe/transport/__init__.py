"""The grader's transport: every rank's process groups carried by one process of the grader's.

Modules:
    wire         -- the frames between a rank and the hub, defined once for both ends.
    client       -- runs in each rank: the ProcessGroup every group of the script becomes.
    hub          -- the grader's process that matches the members' calls, delivers, records.
    collectives  -- what each collective delivers: pure functions the hub applies.
    traffic      -- the hub's report of what it carried (read by grader.traffic).

Why: a verdict about communication must rest on what the submission cannot write. The ranks
hold no connection to one another's transport, only their own socket to the hub, which is
forked from the grader's launcher; what the hub says each rank sent is what it sent.
"""
