// SPEC.md §12: rule codes, their severity and section.

const TABLE = `
MD100 error 3.1 the file is not a readable HDF5 file
MD101 error 3.2 root attribute format is missing or is not "mdiff"
MD102 error 3.2 root attribute format_version is missing or is not MAJOR.MINOR
MD103 error 3.3 the major version is not supported by this reader
MD104 warning 3.3 the minor version is newer than this reader knows
MD105 error 3.4 root attribute extensions is malformed
MD106 error 3.4 an unknown extension is marked must_understand
MD107 warning 3.4 an unknown optional extension is ignored
MD200 error 4.1 root attribute commit is missing or is not a string
MD201 error 4.1 commit is not valid UTF-8 JSON
MD202 error 4.2 commit does not match schemas/commit.schema.json
MD300 error 5.1 group /parameters is missing
MD301 error 5.1 a member of /parameters or /files is not a group
MD302 error 5.2 a link name is not UTF-8, or not the canonical encoding of a parameter name
MD303 warning 5.4 an unknown member or attribute is ignored
MD304 error 5.5 a file path is unsafe, or collides with another path
MD305 error 5.5 a file or the layout is not a replace or delete of a uint8 vector
MD306 error 3.3 a version 1.0 file has /files or /layout
MD307 error 5.6 the weights layout is malformed
MD400 error 7.1 attribute update is missing or is not a string
MD401 error 7.1 update is not valid UTF-8 JSON
MD402 error 7.1 the update type is unknown
MD403 error 7.1 the version of the update type is not supported
MD404 error 7.1 update does not match its type's JSON Schema
MD405 error 7.1 a dataset the update type requires is missing
MD406 error 7.1 a dataset has the wrong storage datatype
MD407 error 7.1 a dataset has the wrong shape
MD408 error 7.4 sparse indices are not strictly increasing or are out of range
MD409 error 6.1 a bool value is neither 0 nor 1
MD410 error 8.4 stored data does not match its sha256
MD411 error 7.5 low_rank is used on a parameter that is not floating point or is 0-d
MD420 error 7.8 an embedded update type is malformed (name, definition, or its functions)
MD421 error 7.8 an embedded function is not a well-formed ONNX model within the size limit
MD422 error 7.8 an embedded function imports a domain or opset other than ai.onnx at the pinned opset
MD423 error 7.8 an embedded function uses an operator off the allowlist
MD424 error 7.8 an embedded function refers to external data
MD425 error 7.8 an embedded function holds subgraphs, local functions or training information
MD426 error 7.8 an embedded function has more nodes or bytes of initializers and constants than the limits
MD427 error 7.8 an embedded function's inputs or output do not match its type and dtype
MD428 error 7.8 an embedded function breaks §7.9's shape rules for a parameter (or gives a result of the wrong shape, or fails when run)
MD500 error 8.1 a link is not a hard link (soft, external or user-defined)
MD501 error 8.1 an object is neither a group nor a dataset
MD502 error 8.2 a dataset uses external raw storage
MD503 error 8.2 a dataset is virtual
MD504 error 8.2 a dataset uses a filter off the allowlist
MD505 error 8.2 a dataset's datatype or dataspace is not allowed
MD506 error 8.2 an attribute's datatype or shape is not allowed
MD507 error 8.3 a dataset's rank exceeds the limit
MD508 error 8.3 a dataset's element count or byte size exceeds the limit
MD509 error 8.3 a dataset declares more data than its storage holds, its chunks do not cover it exactly once, or it is extendible
MD510 error 8.3 an attribute exceeds the size limit
MD511 error 8.3 the file holds more objects or attributes than the limit
MD512 error 8.3 the declared bytes of all datasets exceed the limit
MD513 error 8.1 an object cannot be read (truncated or corrupt file), or a chunk does not decode to its size (§8.3)
MD514 error 8.1 an object is reachable through more than one link
MD600 error 9.2 the base lacks a parameter the update needs
MD601 error 9.2 the base parameter's shape or dtype differs from the update's
MD602 error 9.3 the result does not match the update's sha256
MD603 error 9.2 the base value is not the one the update was made from (base_sha256)
MD800 error 13.2 a commit file's bytes, a range of them or its block list do not hash to its name, or changed while it was read
MD801 error 13.3 a repository file, ref or HEAD is malformed, is not a regular file, or names a missing commit; a ref's name is not a branch name
MD802 error 13.4 a commit cannot be applied to its first parent's state
MD803 error 13.6 another process holds the repository's lock, or moved a remote's branch first (§13.8)
MD804 error 13.7 a merge has conflicts left that its strategy cannot resolve, or cannot be the fast-forward asked for
MD805 error 13.4 an exact update reads a base value that an inexact update (low_rank) made
MD806 error 13.6 a commit would delete most of its parent's parameters, unconfirmed
MD807 error 13.5 a snapshot disagrees with the commits of its commit id
MD808 error 13.4 a commit's state_sha256 is not the digest of the state its first parent's state and its updates make
MD809 error 13.10 a repository found for a command is owned by another user and not trusted
MD700 error 10 the checkpoint format is not supported
MD701 error 10 the checkpoint file is malformed
MD702 error 10 the checkpoint holds a dtype the format does not support
MD703 error 10 the checkpoint format cannot hold the result
MD704 error 10.1 a model folder's weight files and index disagree
MD705 error 10.1 a model folder holds an entry that is not versioned
MD706 error 10.2 an output names something a writer must not replace
`;

export const CODES = {};
for (const line of TABLE.trim().split("\n")) {
  const [code, severity, section, ...rule] = line.split(" ");
  CODES[code] = { severity, section, rule: rule.join(" ") };
}

export function finding(code, path, message) {
  const c = CODES[code];
  if (!c) throw new Error(`unknown rule code ${code}`);
  return { code, severity: c.severity, path, section: c.section, message };
}

// An error that stops an operation, carrying a rule code.
export class MdiffError extends Error {
  constructor(code, message, path = null) {
    super(message);
    this.code = code;
    this.path = path;
  }
}
