"""Reading a submission's answers file (YAML) as untrusted input: no links, a size cap, a
safe loader that also refuses anchors and aliases (a few KiB of `&a [*b, *b, …]` expand to
gigabytes) and bounds nesting and the number of values; every problem becomes a message for
the checks, never an exception."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from grader.checks.base import Answers
from grader.results.escape import cap
from grader.run.safeio import UntrustedFileError, read_untrusted

MAX_ANSWER_BYTES = 256 << 10
MAX_DEPTH = 20
MAX_NODES = 10_000
MAX_MANUAL_CHARS = 4000
MAX_NUMBER_CHARS = 40  # an integer written longer stays text (YAML's 0x… escapes Python's digit limit)


class _Refused(yaml.YAMLError):
    """A well-formed answers file that uses what answers files must not."""

    def __init__(self, problem: str, mark: yaml.Mark | None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.problem_mark = mark


class _AnswersLoader(yaml.SafeLoader):
    """yaml.SafeLoader without anchors and aliases, at most MAX_DEPTH levels and MAX_NODES values."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0
        self.nodes = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise _Refused("uses YAML anchors/aliases (& and *), which answers files do not need", event.start_mark)
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise _Refused(f"holds more than {MAX_NODES} values", event.start_mark)
        if self.depth >= MAX_DEPTH:
            raise _Refused(f"nests deeper than {MAX_DEPTH} levels", event.start_mark)
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _bounded_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int | str:
    """An integer as YAML reads it, unless it is written with more than MAX_NUMBER_CHARS
    characters: then its text (no answer needs such a number, and Python cannot print one
    of 5000 hex digits)."""
    text = loader.construct_scalar(node)
    return text if len(text) > MAX_NUMBER_CHARS else yaml.SafeLoader.construct_yaml_int(loader, node)


_AnswersLoader.add_constructor("tag:yaml.org,2002:int", _bounded_int)


def _parsed(text: str) -> Any:
    loader = _AnswersLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _yaml_problem(filename: str, exc: yaml.YAMLError) -> str:
    """One line on what is wrong, and where."""
    mark = getattr(exc, "problem_mark", None)
    where = f" (line {mark.line + 1})" if mark else f" (character {exc.position + 1})" if isinstance(exc, yaml.reader.ReaderError) else ""
    if isinstance(exc, _Refused):
        return f"{filename} {exc.problem}{where}"
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"{filename} is not valid YAML{where}: {problem}"


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
        parsed = _parsed(data.decode("utf-8", errors="replace"))
    except yaml.YAMLError as exc:
        return Answers(None, _yaml_problem(filename, exc))
    except RecursionError:
        return Answers(None, f"{filename} nests too deeply to be read")
    except ValueError as exc:  # a value YAML accepts and Python cannot hold, e.g. an integer of 5000 digits
        return Answers(None, f"{filename} cannot be read: {exc}")
    if not isinstance(parsed, dict):
        return Answers(None, f"{filename} should hold a mapping of questions to answers, found {type(parsed).__name__}")
    return Answers(parsed)


def manual_texts(answers: Answers, keys: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """The free-text answers at `keys`, as text ('' where missing), each at most MAX_MANUAL_CHARS
    characters (raw: the writers escape it)."""
    texts = []
    for key in keys:
        value = answers.get(key) if answers.data is not None else None
        texts.append((key, "" if value is None else cap(str(value), MAX_MANUAL_CHARS)))
    return tuple(texts)
