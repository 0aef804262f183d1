"""What the walk reports: one rule of SPEC.md §8 broken at one place.

Every code is an error of SPEC.md's validation table (§12), whose row gives its meaning: the walk
reports MD302 (a link name that is not UTF-8), MD500–MD514 (§8.1–§8.3). A caller that keeps its own
kind of finding (mdiff's adds each code's severity and section) makes it from these three fields.
"""

from __future__ import annotations

from dataclasses import dataclass

CODES = ("MD302", "MD500", "MD501", "MD502", "MD503", "MD504", "MD505", "MD506", "MD507", "MD508", "MD509", "MD510",
         "MD511", "MD512", "MD513", "MD514")
LIMIT_CODES = frozenset({"MD507", "MD508", "MD510", "MD511", "MD512"})  # §8.3's limits
WHOLE_FILE_CODES = ("MD511", "MD512")  # past these nothing more of the file is walked (§12.1 rule 2)


@dataclass(frozen=True)
class Finding:
    code: str  # one of CODES
    path: str  # the HDF5 path of the object (or "object@attribute"), at most MAX_REPORTED_PATH characters
    message: str  # what is wrong there, for a person
