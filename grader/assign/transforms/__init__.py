"""The transforms that turn a solution into a template, one per file, applied in order by
grader/assign/release.py. Each takes a Code and returns a Code, or raises MarkerError."""
from grader.assign.transforms.hidden_regions import remove_hidden_regions
from grader.assign.transforms.leftover_markers import reject_leftover_markers
from grader.assign.transforms.marker_spelling import check_marker_spelling
from grader.assign.transforms.solution_regions import replace_solution_regions
from grader.assign.transforms.template_lines import replace_template_lines

TRANSFORMS = (check_marker_spelling, remove_hidden_regions, replace_solution_regions, replace_template_lines, reject_leftover_markers)

__all__ = ["TRANSFORMS"]
