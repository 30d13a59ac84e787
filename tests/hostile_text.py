"""Text a hostile submission puts wherever the grader shows what it wrote (exception messages,
output, file names, answers), for tests of every renderer; `HOSTILE_TEXTS` names each attack.
`BILLION_LAUGHS` is an answers.yaml of about 2.5 KB that expands to 10**10 strings."""
from __future__ import annotations

import re
import sys
import unicodedata

FAKE_SCORE = "Score: 21 of 21 points"

HOSTILE_TEXTS: dict[str, str] = {
    "clear_screen": f"\x1b[2J\x1b[H{FAKE_SCORE}",
    "forged_line": f"boom\n{FAKE_SCORE}",
    "carriage_return": f"failed\r{FAKE_SCORE}",
    "backspaces": "FAIL\x08\x08\x08\x08PASS",
    "c1_csi": "\x9b2J\x85" + FAKE_SCORE,
    "line_separator": f"one\u2028{FAKE_SCORE}\u2029",
    "bidi_override": "\u202etxt.exe\u202c and \u2066isolated\u2069 \u061c",
    "zero_width": "pa\u200bss\u200d\ufeffword",
    "nul": "a\x00b\x7f",
    "lone_surrogate": "bad \ud800 text \udfff",
    "fence_breakout": "```\n# Heading\n<img src=x onerror=alert(1)>\n````",
    "html": "<script>alert(1)</script> & <b>bold</b>",
    "markdown_table": "a | b | c\n|---|---|\n**bold** _it_ [link](javascript:alert(1)) ![x](y)",
    "formula": '=HYPERLINK("http://evil.example","click")',
    "tag_characters": "hidden\U000e0041\U000e0042",
}

HUGE_TEXT = "x" * (1 << 20)  # 1 MiB in one line


def _level(name: str, previous: str) -> str:
    return f"{name}: &{name} [" + ", ".join(f"*{previous}" for _ in range(10)) + "]\n"


BILLION_LAUGHS = (
    'lol0: &lol0 "' + "lol" * 600 + '"\n'
    + "".join(_level(f"lol{i}", f"lol{i - 1}") for i in range(1, 11))
    + "questions:\n  faster: *lol10\n"
)

DEEP_YAML = "questions:\n  faster: " + "[" * 5000 + "]" * 5000 + "\n"


def acting_characters() -> frozenset[str]:
    """Every character that acts on a terminal or a renderer instead of showing, taken from
    Unicode's own categories (controls but tab and newline, surrogates, format characters,
    line and paragraph separators): independent of grader.results.escape's tables."""
    kept = {"\t", "\n"}
    return frozenset(
        chr(code) for code in range(sys.maxunicode + 1)
        if unicodedata.category(chr(code)) in ("Cc", "Cs", "Cf", "Zl", "Zp") and chr(code) not in kept
    )


def raw_acting(text: str, acting: frozenset[str]) -> list[str]:
    """The acting characters (of `acting`) that `text` holds raw."""
    return sorted(set(text) & acting)


def fenced_blocks(text: str) -> tuple[list[str], list[list[str]]]:
    """The lines outside fenced code blocks and each block's content, as CommonMark reads
    backtick fences (a closing fence: only backticks, at least as many as the opening)."""
    outside: list[str] = []
    blocks: list[list[str]] = []
    fence = 0
    for line in text.splitlines():
        if fence:
            closing = re.fullmatch(r" {0,3}(`+) *", line)
            if closing and len(closing.group(1)) >= fence:
                fence = 0
            else:
                blocks[-1].append(line)
            continue
        opening = re.fullmatch(r" {0,3}(`{3,})[^`]*", line)
        if opening:
            fence = len(opening.group(1))
            blocks.append([])
        else:
            outside.append(line)
    assert not fence, "a code block is left open"
    return outside, blocks
