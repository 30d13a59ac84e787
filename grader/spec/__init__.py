"""The assignment spec (assignment.yaml): its model and its loader."""
from grader.spec.load import SpecError, load_assignment
from grader.spec.model import VISIBILITIES, Assignment, CheckSpec, RunDef

__all__ = ["VISIBILITIES", "Assignment", "CheckSpec", "RunDef", "SpecError", "load_assignment"]
