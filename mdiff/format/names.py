"""SPEC.md §5.2: the lossless mapping between parameter names and HDF5 link names.

A parameter name is any non-empty Unicode string. Its link name is the name
with these characters replaced by ``%`` and two upper-case hex digits of
their UTF-8 byte: ``%`` itself, ``/``, every C0 control character and DEL,
and a ``.`` in first position (HDF5 gives ``.`` a meaning and h5dump hides
leading dots). Every other character stays. Decoding refuses anything that
encoding would not produce, so the mapping is a bijection and distinct link
names always mean distinct parameters.
"""

from __future__ import annotations

import re

from mdiff.errors import InvalidFileError


_MUST_ESCAPE = re.compile("[%/\x00-\x1f\x7f]")  # anywhere; a "." only in first position


def encode_name(name: str) -> str:
    """The HDF5 link name of a parameter name."""
    if not isinstance(name, str) or name == "":
        raise ValueError("a parameter name is a non-empty string")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as exc:  # lone surrogates cannot be stored
        raise ValueError(f"parameter name {name!r} is not valid Unicode") from exc
    link = _MUST_ESCAPE.sub(lambda m: f"%{ord(m.group()):02X}", name)
    return "%2E" + link[1:] if link[0] == "." else link


_ESCAPE = re.compile(r"%([0-9A-F]{2})")


def decode_name(link: str) -> str:
    """The parameter name of a link name; InvalidFileError (MD302) unless canonical."""
    if _MUST_ESCAPE.search(link) is None and link and link[0] != ".":
        return link  # nothing escaped, nothing to escape: the link is the name (most are; 3x faster)
    name = _ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), link)
    if name == "" or encode_name(name) != link:
        raise InvalidFileError("MD302", f"link name {link!r} is not a canonical parameter name encoding", link)
    return name
