"""Text a submission controls, made safe for every place the grader shows or stores it.

Exception messages and type names, output tails, file names, notebook cells and free-text
answers reach the console, the markdown summary, results.json, CSV files and receipts. Every
renderer passes such text through this module, never through ad-hoc replaces:

- `visible`: characters that act instead of showing — lone surrogates, C0/C1 controls (ESC,
  CR, BS, NUL, DEL, NEL…), Unicode format characters (bidi overrides and isolates, zero-width
  characters, the BOM) and line/paragraph separators — are written the way Python writes them
  in a literal (`\\x1b`, `\\u202e`, `\\ud800`), tabs become four spaces, and newlines stay only
  when asked. What remains prints as itself, takes no terminal action and encodes as UTF-8.
- `cap`: at most so many characters, then a marker saying how many more there were. Every
  renderer caps before it escapes, so its work and its output are bounded.
- terminal: `terminal_line` (one line: a newline shows as `\\n`) and `terminal_block` (each
  line behind a gutter, so no forged line starts at column 0 like the grader's own lines).
- markdown: `markdown_inline` (one line; markdown's specials backslash-escaped, `<`, `>`, `&`
  as entities, so no raw HTML) and `markdown_block` (a fenced code block whose fence is longer
  than any run of backticks inside, so the text cannot close it).
- `json_safe`: any JSON-able structure with every string (keys too) visible, newlines kept,
  strings and the whole bounded, NaN and infinities dropped: `json.dumps` of it never fails and
  stays small. Every JSON document the grader writes for people (results.json, GitHub
  Classroom's) passes through it whole, so no field of it can keep a character that acts.
- `spreadsheet_cell`: a visible CSV cell that a spreadsheet never reads as a formula.
"""
from __future__ import annotations

import html
import math
import re
from dataclasses import dataclass
from typing import Any

LINE_CHARS = 2000  # one line on the terminal or in markdown
BLOCK_CHARS = 20_000  # one block: a run's output, a check's feedback
JSON_STRING_CHARS = 100_000  # one string in results.json
JSON_TOTAL_CHARS = 2_000_000  # all strings and items of one results.json together
JSON_DEPTH = 32
CELL_CHARS = 32_000  # a spreadsheet cell holds at most 32767 characters
TAB = "    "

# Unicode's format (Cf), line (Zl) and paragraph (Zp) separator characters; a test checks
# that this covers every one the running Python knows.
_FORMAT = (
    "\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f"
    "\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0001\U000e0020-\U000e007f"
)
_ACTING = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff{_FORMAT}]")
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]|~])")
_BACKTICKS = re.compile("`+")
_FORMULA_START = ("=", "+", "-", "@")


def _shown(match: re.Match[str]) -> str:
    """The character as Python writes it in a string literal."""
    code = ord(match.group())
    if code == 0x0D:
        return "\\r"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def visible(text: str, *, keep_newlines: bool = False) -> str:
    """`text` with every character that acts instead of showing written out (`\\x1b`,
    `\\u202e`, `\\ud800`), tabs as spaces, newlines kept only with `keep_newlines` (CR LF
    then counts as a newline)."""
    if keep_newlines:
        text = text.replace("\r\n", "\n")
    text = _ACTING.sub(_shown, text.replace("\t", TAB))
    return text if keep_newlines else text.replace("\n", "\\n")


def cap(text: str, max_chars: int) -> str:
    """`text` cut to `max_chars` characters, with a marker saying how many were left out."""
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}… ({len(text) - max_chars} more characters)"


def terminal_line(text: str, max_chars: int = LINE_CHARS) -> str:
    """One line for the terminal: capped, made visible, newlines shown as `\\n`."""
    return visible(cap(text, max_chars))


def terminal_block(text: str, gutter: str, max_chars: int = BLOCK_CHARS) -> list[str]:
    """The lines of `text` for the terminal, capped and made visible, each behind `gutter`
    (which must not be empty: a line of the text never starts at column 0)."""
    if not gutter:
        raise ValueError("a terminal block needs a gutter")
    return [gutter + line for line in visible(cap(text, max_chars), keep_newlines=True).splitlines()]


def markdown_inline(text: str, max_chars: int = LINE_CHARS) -> str:
    """Text inside a markdown line or table cell: visible, newlines as spaces, markdown's
    specials escaped and `<`, `>`, `&` as entities (no raw HTML)."""
    flat = visible(cap(text, max_chars), keep_newlines=True).replace("\n", " ")
    return html.escape(_MARKDOWN_SPECIAL.sub(r"\\\1", flat), quote=False)


def markdown_block(text: str, max_chars: int = BLOCK_CHARS) -> str:
    """A fenced markdown code block showing `text` verbatim (made visible); its fence is
    longer than any run of backticks inside, so the text cannot close it."""
    content = visible(cap(text, max_chars), keep_newlines=True)
    longest = max((len(run) for run in _BACKTICKS.findall(content)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{content}\n{fence}"


def spreadsheet_cell(value: object, max_chars: int = CELL_CHARS) -> str:
    """A CSV cell: visible (newlines kept), and with a leading apostrophe where a spreadsheet
    would otherwise take it for a formula (= + - @, also after leading spaces)."""
    text = visible(cap(str(value), max_chars), keep_newlines=True)
    return f"'{text}" if text.lstrip().startswith(_FORMULA_START) else text


@dataclass
class _Budget:
    """What is left of the characters and items one document may hold."""

    left: int

    def text(self, value: str, max_chars: int) -> str:
        """`value` capped to what is left (and `max_chars`), visible (newlines kept)."""
        kept = cap(value[:], min(max_chars, max(self.left, 0)))
        self.left -= len(kept)
        return visible(kept, keep_newlines=True)

    def item(self) -> bool:
        """Take one item of a list or mapping; False once nothing is left."""
        self.left -= 1
        return self.left >= 0


def json_safe(value: Any, *, max_string: int = JSON_STRING_CHARS, max_total: int = JSON_TOTAL_CHARS) -> Any:
    """`value` (dicts, lists, tuples, strings, numbers, None) made safe for `json.dumps(...,
    ensure_ascii=False)` and UTF-8: every string visible (`visible`, newlines kept; lone
    surrogates shown as `\\udxxx`), each string capped at
    `max_string`, all strings and items together at about `max_total` (later items dropped,
    with a marker), nesting at JSON_DEPTH, NaN and infinities as None, other objects as text."""
    return _safe(value, _Budget(max_total), max_string, JSON_DEPTH)


def _safe(value: Any, budget: _Budget, max_string: int, depth: int) -> Any:
    """`value` made JSON-safe, taking what it holds from `budget`; `depth` levels may follow."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value) if value.bit_length() <= 64 else budget.text(_described(value), max_string)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        return budget.text(value, max_string)
    if isinstance(value, (dict, list, tuple)) and depth <= 0:
        return f"… (nested deeper than {JSON_DEPTH} levels)"
    if isinstance(value, dict):
        return _safe_mapping(value, budget, max_string, depth - 1)
    if isinstance(value, (list, tuple)):
        return _safe_sequence(value, budget, max_string, depth - 1)
    return budget.text(_described(value), max_string)


def _described(value: object) -> str:
    """str(value), or what it is where even that fails (e.g. an integer too long to print)."""
    try:
        return str(value)
    except (ValueError, TypeError, RecursionError):
        return f"(a value of type {type(value).__name__} that cannot be shown)"


def _safe_mapping(value: dict, budget: _Budget, max_string: int, depth: int) -> dict:
    """A mapping with text keys, its entries made safe until the budget runs out."""
    safe: dict[str, Any] = {}
    items = list(value.items())
    for index, (key, item) in enumerate(items):
        if not budget.item():
            safe["…"] = f"{len(items) - index} more entries"
            break
        name = budget.text(key if isinstance(key, str) else _described(key), max_string)
        safe[name] = _safe(item, budget, max_string, depth)
    return safe


def _safe_sequence(value: list | tuple, budget: _Budget, max_string: int, depth: int) -> list:
    """A list, its items made safe until the budget runs out."""
    safe: list[Any] = []
    for index, item in enumerate(value):
        if not budget.item():
            safe.append(f"… ({len(value) - index} more items)")
            break
        safe.append(_safe(item, budget, max_string, depth))
    return safe
