"""`python -m grader`: the command line."""
from grader.cli import main

raise SystemExit(main())
