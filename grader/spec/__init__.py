"""The assignment spec (assignment.yaml) and the answer key beside it: models and loaders."""
from grader.spec.load import ANSWER_KEY, SpecError, load_answer_key, load_assignment
from grader.spec.model import VISIBILITIES, Assignment, CheckSpec, RunDef

__all__ = ["ANSWER_KEY", "VISIBILITIES", "Assignment", "CheckSpec", "RunDef", "SpecError", "load_answer_key", "load_assignment"]
