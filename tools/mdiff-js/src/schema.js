// Hand-written checks equivalent to the JSON Schemas described in SPEC.md §4.2 (commit) and
// §7.1, §7.3–§7.7 (update objects). Each check returns a list of error strings
// ("where: what"); an empty list means the object matches.
//
// `strict` is false when reading a file of a newer minor version (§3.3): top-level members this
// reader does not know are then ignored instead of being errors. The nested objects (`author`,
// `writer`, `stats`) are closed in every 1.x version.

import { isPlainObject, isInteger, isNumber, describe } from "./json.js";
import { DTYPE_NAMES } from "./dtypes.js";

const HEX64 = /^[0-9a-f]{64}$/;
// §4.2: "" when unknown, else local@domain, each part non-empty and free of @, <, >,
// U+0000-U+0020 and U+007F. (schemas/commit.schema.json's pattern omits U+007F; the prose wins.)
const EMAIL = /^$|^[^@<>\u0000-\u0020\u007f]+@[^@<>\u0000-\u0020\u007f]+$/;
// §4.2: RFC 3339 in UTC, YYYY-MM-DDTHH:MM:SS[.fraction]Z with 1-9 fraction digits.
const DATE = /^([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]{1,9})?Z$/;

function daysInMonth(y, m) {
  if (m === 2) return (y % 4 === 0 && y % 100 !== 0) || y % 400 === 0 ? 29 : 28;
  return [4, 6, 9, 11].includes(m) ? 30 : 31;
}

export function checkDate(s) {
  const m = DATE.exec(s);
  if (!m) return "is not YYYY-MM-DDTHH:MM:SS[.fraction]Z";
  const [y, mo, d, h, mi, se] = m.slice(1, 7).map(Number);
  // A real calendar date and time: year 0001-9999 (proleptic Gregorian), no leap seconds.
  if (y < 1 || mo < 1 || mo > 12 || d < 1 || d > daysInMonth(y, mo)) return "is not a calendar date";
  if (h > 23 || mi > 59 || se > 59) return "is not a time of day";
  return null;
}

function str(errs, where, v, { nonEmpty = false, pattern = null } = {}) {
  if (typeof v !== "string") {
    errs.push(`${where}: ${describe(v)} is not a string`);
    return;
  }
  if (nonEmpty && v.length === 0) errs.push(`${where}: must not be empty`);
  if (pattern && !pattern.test(v)) errs.push(`${where}: ${describe(v)} does not match ${pattern}`);
}

function members(errs, where, obj, required, optional, strict) {
  for (const k of required) if (!(k in obj)) errs.push(`${where}: '${k}' is a required member`);
  if (strict) {
    for (const k of Object.keys(obj)) {
      if (!required.includes(k) && !optional.includes(k)) errs.push(`${where}: member '${k}' is not allowed`);
    }
  }
}

function withoutMember(obj, name) {
  const copy = Object.create(null); // as the strict JSON parser makes objects
  for (const k of Object.keys(obj)) if (k !== name) copy[k] = obj[k];
  return copy;
}

// `minor`: the file's minor format version; `state_sha256` (§4.2) came with 1.3 (null: any version).
export function checkCommit(c, strict = true, minor = null) {
  const errs = [];
  if (!isPlainObject(c)) return [`(root): ${describe(c)} is not an object`];
  const hasStateDigest = minor === null || minor >= 3n;
  members(errs, "(root)", c, ["author", "date", "message", "parents", "writer", "meta"], hasStateDigest ? ["state_sha256"] : [], strict);
  if (strict && !hasStateDigest && "state_sha256" in c) {
    errs.push(`(root): member 'state_sha256' is not allowed in format version 1.${minor} (it came with 1.3, §3.3)`);
  }
  if (hasStateDigest && "state_sha256" in c) str(errs, "state_sha256", c.state_sha256, { pattern: HEX64 });
  if ("author" in c) {
    const a = c.author;
    if (!isPlainObject(a)) errs.push("author: is not an object");
    else {
      members(errs, "author", a, ["name", "email"], [], true);
      if ("name" in a) str(errs, "author/name", a.name, { nonEmpty: true });
      if ("email" in a) str(errs, "author/email", a.email, { pattern: EMAIL });
    }
  }
  if ("date" in c) {
    if (typeof c.date !== "string") errs.push("date: is not a string");
    else {
      const why = checkDate(c.date);
      if (why) errs.push(`date: ${describe(c.date)} ${why}`);
    }
  }
  if ("message" in c) str(errs, "message", c.message);
  if ("parents" in c) {
    const p = c.parents;
    if (!Array.isArray(p)) errs.push("parents: is not an array");
    else {
      p.forEach((x, i) => str(errs, `parents/${i}`, x, { pattern: HEX64 }));
      if (new Set(p.map((x) => describe(x))).size !== p.length) errs.push("parents: has duplicate elements");
    }
  }
  if ("writer" in c) {
    const w = c.writer;
    if (!isPlainObject(w)) errs.push("writer: is not an object");
    else {
      members(errs, "writer", w, ["name", "version"], [], true);
      if ("name" in w) str(errs, "writer/name", w.name, { nonEmpty: true });
      if ("version" in w) str(errs, "writer/version", w.version, { nonEmpty: true });
    }
  }
  if ("meta" in c) {
    const m = c.meta;
    if (!isPlainObject(m)) errs.push("meta: is not an object");
    else for (const [k, v] of Object.entries(m)) if (typeof v !== "string") errs.push(`meta/${k}: is not a string`);
  }
  return errs;
}

export const UPDATE_TYPES = ["dense", "sparse", "low_rank", "replace", "delete"];
export const UPDATE_VERSIONS = { dense: [1, 2], sparse: [1, 2], low_rank: [1], replace: [1], delete: [1] };

// The members of each type's schema, besides type and version.
const TYPE_MEMBERS = {
  dense: { required: ["shape", "dtype", "sha256"], optional: ["lossy", "stats"] },
  sparse: { required: ["shape", "dtype", "sha256"], optional: ["lossy", "stats"] },
  replace: { required: ["shape", "dtype", "sha256"], optional: ["lossy", "stats"] },
  low_rank: { required: ["shape", "dtype", "scale", "A_sha256", "B_sha256"], optional: ["lossy", "stats"] },
  delete: { required: ["shape", "dtype"], optional: ["lossy", "stats"] },
};

// §7.1, §3.3: the types that compute their result from the base's values may name that value
// (`base_sha256`) from format version 1.2 on. `replace` and `delete` read no base value: the member
// is never theirs. In a 1.0 or 1.1 file it is not among the version's members, so a strict check
// refuses it there (MD404).
export const READS_BASE_VALUE = new Set(["dense", "sparse", "low_rank"]);
const BASE_SHA256_SINCE_MINOR = 2n;

// Checks an update object whose `type` is known and whose `version` is supported. `minor` is the
// file's minor format version (a BigInt; null when unknown, read as the newest this reader knows).
// `embedded`: {exact} for a type the file defines (§7.8: it reads the base; `sha256` iff exact)
export function checkUpdate(u, strict = true, minor = null, embedded = null) {
  const errs = [];
  const t = embedded ? { required: ["shape", "dtype", ...(embedded.exact ? ["sha256"] : [])], optional: ["lossy", "stats"] } : TYPE_MEMBERS[u.type];
  const inVersion = minor === null || minor >= BASE_SHA256_SINCE_MINOR;
  const hasBaseSha = (embedded !== null || READS_BASE_VALUE.has(u.type)) && inVersion;
  const optional = hasBaseSha ? [...t.optional, "base_sha256"] : t.optional;
  const given = strict && "base_sha256" in u && !hasBaseSha;
  members(errs, "(root)", given ? withoutMember(u, "base_sha256") : u, ["type", "version", ...t.required], optional, strict);
  if (given) {
    errs.push(inVersion
      ? `member 'base_sha256' is not allowed: a ${u.type} update reads no base value (§7.1)`
      : `member 'base_sha256' is not allowed in format version 1.${minor} (it came with 1.2, §3.3)`);
  }
  if (hasBaseSha && "base_sha256" in u) str(errs, "base_sha256", u.base_sha256, { pattern: HEX64 });
  if ("shape" in u) {
    const s = u.shape;
    if (!Array.isArray(s)) errs.push("shape: is not an array");
    else {
      if (s.length > 32) errs.push(`shape: has ${s.length} elements, more than 32`);
      s.forEach((d, i) => {
        if (!isInteger(d)) errs.push(`shape/${i}: ${describe(d)} is not an integer`);
        else if (d < 0) errs.push(`shape/${i}: ${describe(d)} is less than 0`);
      });
    }
  }
  if ("dtype" in u && !DTYPE_NAMES.includes(u.dtype)) errs.push(`dtype: ${describe(u.dtype)} is not a dtype of §6.1`);
  for (const k of ["sha256", "A_sha256", "B_sha256"]) {
    if (t.required.includes(k) && k in u) str(errs, k, u[k], { pattern: HEX64 });
  }
  if ("scale" in u && t.required.includes("scale") && !isNumber(u.scale)) errs.push(`scale: ${describe(u.scale)} is not a number`);
  if ("lossy" in u && typeof u.lossy !== "boolean") errs.push(`lossy: ${describe(u.lossy)} is not a boolean`);
  if ("stats" in u) {
    const st = u.stats;
    if (!isPlainObject(st)) errs.push("stats: is not an object");
    else {
      members(errs, "stats", st, [], ["changed", "rel_change"], true);
      if ("changed" in st && (!isInteger(st.changed) || st.changed < 0)) errs.push(`stats/changed: ${describe(st.changed)} is not an integer >= 0`);
      if ("rel_change" in st && (!isNumber(st.rel_change) || st.rel_change < 0)) errs.push(`stats/rel_change: ${describe(st.rel_change)} is not a number >= 0`);
    }
  }
  return errs;
}
