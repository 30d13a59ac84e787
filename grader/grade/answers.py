"""Reading a submission's answers file (YAML) as untrusted input: no links, a size cap,
safe_load only; every problem becomes a message for the checks, never an exception."""
from __future__ import annotations

from pathlib import Path

import yaml

from grader.checks.base import Answers
from grader.run.safeio import UntrustedFileError, read_untrusted

MAX_ANSWER_BYTES = 256 << 10


def load_answers(submission: Path, filename: str) -> Answers:
    """The parsed answers, or an Answers whose `problem` says what is wrong with the file."""
    try:
        data, longer = read_untrusted(submission / filename, MAX_ANSWER_BYTES)
    except FileNotFoundError:
        return Answers(None, f"{filename} is not in the submission")
    except (OSError, UntrustedFileError) as exc:
        return Answers(None, f"{filename} cannot be read: {exc}")
    if longer:
        return Answers(None, f"{filename} is larger than {MAX_ANSWER_BYTES >> 10} KiB")
    try:
        parsed = yaml.safe_load(data.decode("utf-8", errors="replace"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark else ""
        return Answers(None, f"{filename} is not valid YAML{where}: {getattr(exc, 'problem', None) or exc}")
    if not isinstance(parsed, dict):
        return Answers(None, f"{filename} should hold a mapping of questions to answers, found {type(parsed).__name__}")
    return Answers(parsed)


def manual_texts(answers: Answers, keys: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """The free-text answers at `keys`, as text ('' where missing)."""
    texts = []
    for key in keys:
        value = answers.get(key) if answers.data is not None else None
        texts.append((key, "" if value is None else str(value)[:4000]))
    return tuple(texts)
