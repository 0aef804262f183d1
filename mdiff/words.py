"""How mdiff says sizes and counts to a person, in one place for every command and message.

Sizes are decimal (SI), as disks, Hugging Face and ``save_pretrained``'s ``max_shard_size`` ("5GB" is
5·10⁹ bytes) count them, and as the progress bars show them: "512 B", "1.5 kB", "473.9 MB", "3.2 GB".
Counts take their singular for one: "1 file", "2 files".
"""

from __future__ import annotations

_UNITS = ("B", "kB", "MB", "GB", "TB", "PB")


def format_size(n: float) -> str:
    """Bytes for a person, in decimal units: "512 B", "1.5 kB", "473.9 MB", "3.2 GB", … "1.2 PB"."""
    if abs(n) < 1000:
        return f"{n:.0f} B"
    for unit in _UNITS[1:]:
        n /= 1000
        if abs(n) < 999.95 or unit == _UNITS[-1]:  # 999,960 bytes are "1.0 MB", not "1000.0 kB"
            return f"{n:.1f} {unit}"
    raise AssertionError("unreachable")


def count(n: int, singular: str, plural: str | None = None) -> str:
    """``n`` and the noun, singular for one: count(1, "file") is "1 file", count(3, "entry", "entries") "3 entries"."""
    return f"{n} {singular if n == 1 else plural or singular + 's'}"
