"""Submissions: the queue of work (queue.py), how a grading job is started and watched
(backends.py: local processes, Slurm, and a fake one for tests), what runs on the node
(worker.py), the dispatcher that settles every queued submission (dispatch.py), and the git
hook (hook.py)."""
