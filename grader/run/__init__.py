"""Running jobs: the interface (job.py) and its implementations (local.py, fake.py)."""
