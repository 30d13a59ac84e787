"""Per practical: the checks it offers to its spec and the reference the grader computes itself (`references`)."""
