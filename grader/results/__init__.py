"""Results: the model and its writers (Gradescope JSON, console, markdown)."""
