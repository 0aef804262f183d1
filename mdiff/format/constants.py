"""SPEC.md §3: the names and numbers that identify an mdiff file."""

FORMAT_NAME = "mdiff"
FORMAT_MAJOR = 1
FORMAT_MINOR = 3  # the newest minor version this reader implements (§3.3)
FORMAT_VERSION = "1.0"  # what a writer writes for a file that uses nothing a later minor version added
FILES_MINOR = 1  # the minor version that added /files and /layout (§5.5, §5.6)
BASE_SHA256_MINOR = 2  # … and the `base_sha256` member of an update (§7.1)
STATE_DIGEST_MINOR = 3  # … and the `state_sha256` member of a commit (§4.2, §13.5)
SUB_MINOR = 3  # … and version 2 of `dense` and `sparse`: SUB deltas, sparse gaps (§7.3, §7.4)

# Root attributes (§3.2, §3.4, §4.1)
ATTR_FORMAT = "format"
ATTR_VERSION = "format_version"
ATTR_EXTENSIONS = "extensions"
ATTR_COMMIT = "commit"

PARAMETERS_GROUP = "parameters"  # §5.1
UPDATE_TYPES_GROUP = "update_types"  # §7.8
FILES_GROUP = "files"  # §5.5, version 1.1
LAYOUT_GROUP = "layout"  # §5.6, version 1.1
ATTR_DEFINITION = "definition"  # §7.8, on each group in /update_types
ATTR_UPDATE = "update"  # §7.1, on each parameter group

# Extensions this reader understands (§3.4). Version 1.0 defines none.
KNOWN_EXTENSIONS: frozenset[str] = frozenset()

# HDF5 file-format bounds every writer uses (§3.1): readable by HDF5 1.10 and h5wasm,
# and large enough for attributes over 64 KiB (dense attribute storage).
LIBVER = ("v110", "v110")
