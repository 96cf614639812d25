"""Make text taken from logs, dumps and artifacts safe to print on a terminal.

Owns `safe_text`, the one escaping every human-facing output uses (`relaunch analyze`,
`fr`, `audit` in text form): C0 control characters other than newline and tab, DEL, the
C1 controls (U+0080-U+009F), the Unicode bidirectional controls and lone surrogates are
replaced by a
visible `\\xNN` / `\\uNNNN` escape, so a log line cannot set the terminal title (OSC),
plant a hyperlink (OSC 8), clear the screen, move the cursor or reorder what is shown.
"""

from __future__ import annotations

_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))


def _escape(cp: int) -> str:
    return f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}"


_TABLE: dict[int, str] = {
    cp: _escape(cp)
    for cp in (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0), *_BIDI)
    if cp not in (0x09, 0x0A)
}


def safe_text(text: str) -> str:
    """`text` with every terminal control character escaped; newline and tab are kept.

    Lone surrogates (from file names that are not UTF-8) become `\\udcNN`, so printing the
    result never raises UnicodeEncodeError."""
    return text.translate(_TABLE).encode("utf-8", "backslashreplace").decode("utf-8")


def safe_line(text: str) -> str:
    """`text` as one terminal line: newline and tab escaped too (for one-line messages)."""
    return safe_text(text).replace("\n", "\\n").replace("\t", "\\t")
