// Reading a repository (SPEC.md §13): the layout of §13.1, commit ids (§13.2), revisions (§13.3) and
// the state at a commit (§13.4), starting at a snapshot only where it agrees with its commits (§13.5,
// MD807), and the values of a state that are inexact (§13.4, MD805). Read-only: no lock is taken
// (§13.6 concerns writers).

import fs from "node:fs";
import path from "node:path";
import crypto from "node:crypto";
import { MdiffError } from "./codes.js";
import { validateFile } from "./validate.js";
import { applyValidated, applyFileUpdates, refuseInvalid, asMdiffError } from "./apply.js";
import { parseStrict } from "./json.js";
import { BlockIdHasher } from "./block_ids.js";

// §13.1: a repository's format says which kind of commit ids it holds (§4.3).
export const FORMAT_LINES = { "mdiff-repository 1\n": 1, "mdiff-repository 2\n": 2 };
export const FORMAT_LINE = "mdiff-repository 2\n"; // what a writer creates
export { BlockIdHasher } from "./block_ids.js";
const COMMIT_ID = /^[0-9a-f]{64}$/;
const COMMIT_FILE = /^([0-9a-f]{64})\.mdiff$/;
const BRANCH = /^[A-Za-z0-9][A-Za-z0-9._-]*(\/[A-Za-z0-9][A-Za-z0-9._-]*)*$/;
// §13.3: NAME, NAME@{N}, @{N} or @ (HEAD), then ~N / ^ moves; no name of §13.1 holds '@', '~' or '^'.
const REVISION = /^([^~^@]*)(?:@\{([0-9]+)\}|(@))?((?:~[0-9]*|\^)*)$/;
// §13.6: a reflog line; §13.1: a line is at most this long, its newline included.
const REFLOG_LINE = /^([0-9a-f]{64}) ([0-9a-f]{64}) (0|[1-9][0-9]{0,19}) ([^\x00-\x1f\x7f]*)$/;
const MAX_REFLOG_LINE_BYTES = 1152;
const NO_COMMIT = "0".repeat(64);
const PREFIX = /^[0-9a-f]{4,63}$/;
const REMOTE = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

const short = (id) => id.slice(0, 12);

// §13.4: updates that carry a sha256 and read their base value. Applied to an inexact value they are
// refused (MD805). (Embedded types, §7.8, are not run by mdiff-js: a file holding one is refused.)
const EXACT_READS_BASE = new Set(["dense", "sparse"]);
// Updates without a sha256: the value they set is inexact (§7.5's tolerance).
const INEXACT = new Set(["low_rank"]);

// §13.5: a snapshot's `meta.inexact`, a JSON array of parameter names (absent: none), as a Set;
// null when it is malformed (the snapshot is then unusable).
function inexactListed(meta) {
  if (!Object.prototype.hasOwnProperty.call(meta, "inexact")) return new Set();
  if (typeof meta.inexact !== "string") return null;
  let names;
  try {
    names = parseStrict(meta.inexact);
  } catch {
    return null;
  }
  if (!Array.isArray(names) || !names.every((n) => typeof n === "string")) return null;
  return new Set(names);
}

function md801(message, where = null) {
  return new MdiffError("MD801", message, where);
}

// §13.1: branch names. (A full commit id is none: it always names that commit, §13.3.)
const MAX_BRANCH_BYTES = 255;
export function validBranch(name) {
  return BRANCH.test(name) && !name.includes("..") && !name.endsWith(".lock") &&
    Buffer.byteLength(name, "utf8") <= MAX_BRANCH_BYTES && !COMMIT_ID.test(name);
}

// §13.1: a reader reads at most this much of `format`, HEAD or a ref (HEAD naming the longest branch).
const MAX_SMALL_FILE_BYTES = "ref: refs/heads/".length + MAX_BRANCH_BYTES + 1;
const { O_RDONLY, O_NOFOLLOW = 0, O_NONBLOCK = 0 } = fs.constants;
const PROC_FD = "/proc/self/fd";

function kindOfStat(st) {
  if (st.isSymbolicLink()) return "a symbolic link";
  if (st.isDirectory()) return "a folder";
  if (st.isFIFO()) return "a FIFO";
  if (st.isCharacterDevice()) return "a character device";
  if (st.isBlockDevice()) return "a block device";
  if (st.isSocket()) return "a socket";
  if (st.isFile()) return "a regular file";
  return "not a regular file";
}

// What `p` is, a link not followed ("a regular file", "a folder", "a symbolic link", ...); null when
// it does not exist.
function kindOf(p) {
  try {
    return kindOfStat(fs.lstatSync(p));
  } catch (e) {
    if (e.code === "ENOENT" || e.code === "ENOTDIR") return null;
    throw md801(`${p}: ${e.code || e.message}`, p);
  }
}

// §13.10: a repository whose .mdiff folder another user owns is refused (MD809) unless trusted:
// MDIFF_SAFE_DIRECTORIES, or a `safe.directory = PATH` line of $XDG_CONFIG_HOME/mdiff/config; `*` trusts all.
function safeDirectories(env = process.env) {
  const listed = (env.MDIFF_SAFE_DIRECTORIES || "").split(":");
  const base = env.XDG_CONFIG_HOME || path.join(env.HOME || "", ".config");
  let text = "";
  try {
    text = fs.readFileSync(path.join(base, "mdiff", "config"), "utf8");
  } catch {
    text = "";
  }
  for (const line of text.split("\n")) {
    const at = line.indexOf("=");
    if (at >= 0 && line.slice(0, at).trim() === "safe.directory" && line.slice(at + 1).trim()) {
      listed.push(line.slice(at + 1).trim());
    }
  }
  return listed.filter((p) => p === "*" || path.isAbsolute(p));
}

const realOrNull = (p) => {
  try {
    return fs.realpathSync(p);
  } catch {
    return null;
  }
};

export function checkOwner(root, env = process.env) {
  if (typeof process.geteuid !== "function") return;
  let me = process.geteuid();
  if (me === 0 && /^[0-9]+$/.test(env.SUDO_UID || "")) me = Number(env.SUDO_UID);
  let owner;
  try {
    owner = fs.statSync(path.join(root, ".mdiff")).uid;
  } catch {
    return; // nothing there: opening it says what is wrong
  }
  if (owner === me || (owner === 0 && process.geteuid() === 0)) return;
  const real = realOrNull(root);
  for (const entry of safeDirectories(env)) {
    if (entry === "*" || (real !== null && realOrNull(entry) === real)) return;
  }
  throw new MdiffError("MD809", `the repository ${root} is owned by another user (uid ${owner}, not ${me}): ` +
    `not used (§13.10); if you trust it, set MDIFF_SAFE_DIRECTORIES=${real || root}`, root);
}

const sameFile = (a, b) =>
  a.dev === b.dev && a.ino === b.ino && a.size === b.size && a.mtimeMs === b.mtimeMs && a.ctimeMs === b.ctimeMs;
export class Repository {
  // `root` is the project folder holding `.mdiff/`.
  constructor(root, opts = {}) {
    this.root = root;
    this.dir = path.join(root, ".mdiff");
    this.limits = opts.limits;
    this.parentsOf = new Map();
    const format = this.readSmall(path.join(this.dir, "format"));
    if (format === null) throw md801(`${root} holds no repository: ${path.join(this.dir, "format")} is missing`, this.dir);
    if (!Object.hasOwn(FORMAT_LINES, format)) {
      throw md801(`${path.join(this.dir, "format")} says no repository format this reader reads ` +
        `(${Object.keys(FORMAT_LINES).map((l) => JSON.stringify(l)).join(" or ")})`, this.dir);
    }
    this.format = FORMAT_LINES[format];
  }

  // §13.1: every folder from .mdiff/ (which may itself be a link) down to `p`'s is a real folder.
  checkFolders(p) {
    const rel = path.relative(this.dir, path.dirname(p));
    let at = this.dir;
    for (const part of rel ? rel.split(path.sep) : []) {
      at = path.join(at, part);
      const kind = kindOf(at);
      if (kind !== null && kind !== "a folder") {
        throw md801(`${at} is ${kind}: ${kind === "a symbolic link" ? "a reader follows no link inside .mdiff/" : "a folder belongs there"} (§13.1)`, at);
      }
    }
  }

  // {fd, st} of the regular file `p` under .mdiff/, opened without blocking and without following a
  // link (§13.1); null when it does not exist; MD801 when it is anything else.
  openFile(p) {
    this.checkFolders(p);
    let fd;
    try {
      fd = fs.openSync(p, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
    } catch (e) {
      if (e.code === "ENOENT" || e.code === "ENOTDIR") return null;
      const kind = kindOf(p) || "not a regular file";
      throw md801(`${p} is ${kind}: ${kind === "a symbolic link" ? "a reader follows no link inside .mdiff/" : "it is not a regular file"} (§13.1)`, p);
    }
    const st = fs.fstatSync(fd);
    if (!st.isFile()) {
      fs.closeSync(fd);
      throw md801(`${p} is ${kindOfStat(st)}: it is not a regular file (§13.1)`, p);
    }
    return { fd, st };
  }

  // A small file of the repository (`format`, HEAD, a ref) as text: null when it does not exist;
  // MD801 when it is not a regular UTF-8 file of at most MAX_SMALL_FILE_BYTES. Its content is never
  // shown in a message.
  readSmall(p) {
    const opened = this.openFile(p);
    if (opened === null) return null;
    const buf = Buffer.alloc(MAX_SMALL_FILE_BYTES + 1);
    let got = 0;
    try {
      for (let n; got < buf.length && (n = fs.readSync(opened.fd, buf, got, buf.length - got, got)) > 0; ) got += n;
    } finally {
      fs.closeSync(opened.fd);
    }
    if (got > MAX_SMALL_FILE_BYTES) throw md801(`${p} is malformed: longer than ${MAX_SMALL_FILE_BYTES} bytes (§13.1)`, p);
    try {
      return new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(buf.subarray(0, got)); // a BOM is kept: malformed (§13.1)
    } catch {
      throw md801(`${p} is malformed: not UTF-8 text`, p);
    }
  }

  commitPath(id) {
    return path.join(this.dir, "commits", `${id}.mdiff`);
  }

  snapshotPath(id) {
    return path.join(this.dir, "snapshots", `${id}.mdiff`);
  }

  hasCommit(id) {
    this.checkFolders(this.commitPath(id));
    return kindOf(this.commitPath(id)) !== null; // whatever it is: reading it says what is wrong
  }

  // A commit id read from a ref or HEAD ("<id>\n"), which must name a commit in commits/.
  target(text, what) {
    if (!(text.endsWith("\n") && COMMIT_ID.test(text.slice(0, -1)))) {
      throw md801(`${what} is malformed: not a commit id and one newline (§13.1)`);
    }
    const id = text.slice(0, -1);
    if (!this.hasCommit(id)) throw md801(`${what} names commit ${short(id)}, which is not in commits/`);
    return id;
  }

  // The commit a branch points to; null when there is no such branch (an invalid name is none).
  branch(name) {
    if (!validBranch(name)) return null;
    const file = path.join(this.dir, "refs", "heads", ...name.split("/"));
    this.checkFolders(file);
    if (kindOf(file) === "a folder") return null; // a folder of branches (`exp` of `exp/lora`)
    const text = this.readSmall(file);
    return text === null ? null : this.target(text, `ref ${JSON.stringify(name)}`);
  }

  // The commit a tag names (refs/tags/<name>, §13.1: branch-name rules); null when there is no such tag.
  tag(name) {
    if (!validBranch(name)) return null;
    const file = path.join(this.dir, "refs", "tags", ...name.split("/"));
    this.checkFolders(file);
    const kind = kindOf(file);
    if (kind === null || kind === "a folder") return null; // no such tag (a repository without refs/tags has none)
    const text = this.readSmall(file);
    return text === null ? null : this.target(text, `tag ${JSON.stringify(name)}`);
  }

  // Whether refs/tags/<name> exists (whatever it is), its folders on the way real folders; never throws.
  hasTag(name) {
    const file = path.join(this.dir, "refs", "tags", ...name.split("/"));
    try {
      this.checkFolders(file);
      return kindOf(file) !== null;
    } catch {
      return false;
    }
  }

  // §13.8: the commit the remote-tracking ref `<remote>/<branch>` names (refs/remotes/<remote>/<branch>);
  // null when there is none.
  tracking(name) {
    const slash = name.indexOf("/");
    if (slash < 0) return null;
    const [remote, branch] = [name.slice(0, slash), name.slice(slash + 1)];
    if (!REMOTE.test(remote) || remote.includes("..") || remote.endsWith(".lock") || !validBranch(branch)) return null;
    const file = path.join(this.dir, "refs", "remotes", remote, ...branch.split("/"));
    this.checkFolders(file);
    if (kindOf(file) === "a folder") return null;
    const text = this.readSmall(file);
    return text === null ? null : this.target(text, `remote-tracking ref ${JSON.stringify(name)}`);
  }

  // {branch, id} of HEAD: branch null when detached; id null on a branch without commits.
  head() {
    const text = this.readSmall(path.join(this.dir, "HEAD"));
    if (text === null) throw md801(`${path.join(this.dir, "HEAD")} is missing`);
    if (text.startsWith("ref:")) {
      const m = /^ref: refs\/heads\/([^\n]+)\n$/.exec(text);
      if (!m || !validBranch(m[1])) throw md801("HEAD is malformed: `ref: refs/heads/` and a valid branch name, with one newline, expected");
      return { branch: m[1], id: this.branch(m[1]) };
    }
    return { branch: null, id: this.target(text, "HEAD") }; // detached: a commit id and a newline
  }

  // Every commit id in commits/ (files of other names, e.g. a writer's temporary files, are ignored).
  commitIds() {
    let names;
    try {
      this.checkFolders(path.join(this.dir, "commits", "x"));
      names = fs.readdirSync(path.join(this.dir, "commits"));
    } catch (e) {
      if (e instanceof MdiffError) throw e;
      if (e.code === "ENOENT") return [];
      throw md801(`${path.join(this.dir, "commits")}: ${e.code || e.message}`);
    }
    return names.map((n) => COMMIT_FILE.exec(n)).filter(Boolean).map((m) => m[1]).sort();
  }

  // §13.2: the commit file of `id`, validated (with its data when `data`) from the very bytes that
  // were hashed (§4.3: by block list in a format-2 repository, the bytes' SHA-256 in format 1): it is
  // opened once, hashed through that descriptor, and read through the same
  // descriptor (/proc/self/fd/N); refused (MD800) if its bytes do not hash to its name or it
  // changed meanwhile. Returns {v, file, done}: `done()` closes it, checking it did not change.
  async openVerified(id, data) {
    const file = this.commitPath(id);
    const opened = this.openFile(file);
    if (opened === null) throw md801(`commit ${short(id)} is not in commits/`, file);
    const { fd, st } = opened;
    let v = null;
    const unchanged = () => {
      const now = fs.fstatSync(fd);
      if (!sameFile(st, now)) throw new MdiffError("MD800", `commit file ${short(id)} changed while it was read`, file);
    };
    try {
      const hash = this.format === 2 ? new BlockIdHasher() : crypto.createHash("sha256");
      const buf = Buffer.alloc(Math.max(1, Math.min(st.size, 1 << 20)));
      let done = 0;
      while (done < st.size) {
        const n = fs.readSync(fd, buf, 0, Math.min(buf.length, st.size - done), done);
        if (n <= 0) break;
        hash.update(buf.subarray(0, n));
        done += n;
      }
      const got = hash.digest("hex");
      unchanged();
      if (done !== st.size || got !== id) {
        throw new MdiffError("MD800", `commit file ${short(id)} is corrupt: its bytes hash to ${short(got)}`, file);
      }
      const readable = fs.existsSync(PROC_FD) ? `${PROC_FD}/${fd}` : file;
      v = await validateFile(readable, { data, limits: this.limits });
      unchanged();
      if (readable === file && !sameFile(st, fs.lstatSync(file))) {
        throw new MdiffError("MD800", `commit file ${short(id)} changed while it was read`, file);
      }
    } catch (e) {
      if (v) v.close();
      fs.closeSync(fd);
      throw e;
    }
    const finish = () => {
      try {
        v.close();
        unchanged();
      } finally {
        fs.closeSync(fd);
      }
    };
    return { v, file, done: finish };
  }

  // The parents of a commit (§4.2), read from its verified file.
  async parents(id) {
    if (this.parentsOf.has(id)) return this.parentsOf.get(id);
    const { v, file, done } = await this.openVerified(id, false);
    try {
      refuseInvalid(v, file);
    } catch (e) {
      throw new MdiffError("MD802", `commit ${short(id)} cannot be read: ${e.code}: ${e.message}`, file);
    } finally {
      done();
    }
    const parents = v.commit.parents;
    this.parentsOf.set(id, parents);
    return parents;
  }

  // The first parent of a commit (null for a root), which must be in commits/.
  async firstParent(id) {
    const parents = await this.parents(id);
    if (parents.length === 0) return null;
    if (!this.hasCommit(parents[0])) {
      throw md801(`commit ${short(id)} names the parent ${short(parents[0])}, which is not in commits/`, this.commitPath(id));
    }
    return parents[0];
  }

  // §13.3: the ref whose reflog NAME@{N} reads: HEAD's for HEAD; for the empty name (@{N}) the current
  // branch's, HEAD's when detached; else the name looked up as a revision's (branch, tag, remote-tracking
  // ref), then as a branch, tag or remote-tracking ref that no longer exists but whose reflog does.
  reflogRef(name) {
    if (name === "") {
      const text = this.readSmall(path.join(this.dir, "HEAD"));
      const m = text === null ? null : /^ref: refs\/heads\/([^\n]+)\n$/.exec(text);
      if (m && validBranch(m[1])) return `refs/heads/${m[1]}`;
      this.head(); // a malformed or missing HEAD is MD801
      return "HEAD";
    }
    if (name === "HEAD") return "HEAD";
    // whether .mdiff/<relative> exists and is not a folder (the ref is not read: its reflog is)
    const exists = (relative) => {
      const file = path.join(this.dir, ...relative.split("/"));
      this.checkFolders(file);
      const kind = kindOf(file);
      return kind !== null && kind !== "a folder";
    };
    const named = [];
    if (validBranch(name)) {
      if (exists(`refs/heads/${name}`)) return `refs/heads/${name}`;
      if (exists(`refs/tags/${name}`)) return `refs/tags/${name}`;
      named.push(`refs/heads/${name}`, `refs/tags/${name}`);
    }
    const slash = name.indexOf("/");
    if (slash > 0) {
      const [remote, branch] = [name.slice(0, slash), name.slice(slash + 1)];
      if (REMOTE.test(remote) && !remote.includes("..") && !remote.endsWith(".lock") && validBranch(branch)) {
        if (exists(`refs/remotes/${name}`)) return `refs/remotes/${name}`;
        named.push(`refs/remotes/${name}`);
      }
    }
    for (const ref of named) {
      const file = path.join(this.dir, "logs", ...ref.split("/"));
      this.checkFolders(file);
      if (kindOf(file) !== null) return ref; // a deleted ref's reflog stays (§13.6)
    }
    throw md801(`${JSON.stringify(name.slice(0, 80))} has no reflog: not HEAD, a branch, a tag or a remote-tracking ref`);
  }

  // §13.3: the commit NAME@{nth} names: the new side of entry `nth` of the ref's reflog, counted from the
  // newest (0). The reflog is read a line at a time (§13.1, §13.6), keeping the last nth + 1 entries.
  reflogTarget(name, nth) {
    const ref = this.reflogRef(name);
    const spelled = `${name.slice(0, 80)}@{${nth}}`;
    const file = path.join(this.dir, "logs", ...ref.split("/"));
    const opened = this.openFile(file);
    if (opened === null) throw md801(`${spelled}: ${ref} has no reflog`, file);
    const window = [];
    let count = 0;
    try {
      const buf = Buffer.alloc(1 << 16);
      let pending = Buffer.alloc(0);
      let at = 0;
      for (let n; (n = fs.readSync(opened.fd, buf, 0, buf.length, at)) > 0; at += n) {
        pending = Buffer.concat([pending, buf.subarray(0, n)]);
        let newline;
        while ((newline = pending.indexOf(0x0a)) >= 0) {
          const line = pending.subarray(0, newline);
          pending = pending.subarray(newline + 1);
          count += 1;
          if (line.length + 1 > MAX_REFLOG_LINE_BYTES) throw md801(`${file} is malformed: line ${count} is too long`, file);
          let text;
          try {
            text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(line); // a BOM is kept, as mdiff does
          } catch {
            throw md801(`${file} is malformed: line ${count} is not UTF-8 text`, file);
          }
          const m = REFLOG_LINE.exec(text);
          if (!m) throw md801(`${file} is malformed: line ${count} is not \`<old> <new> <seconds> <message>\``, file);
          window.push(m[2]);
          if (window.length > nth + 1) window.shift();
        }
        if (pending.length >= MAX_REFLOG_LINE_BYTES) throw md801(`${file} is malformed: line ${count + 1} is too long`, file);
      }
    } finally {
      fs.closeSync(opened.fd);
    }
    // an unterminated last line (a writer killed while appending) is no entry
    if (count <= nth) throw md801(`${spelled}: the reflog of ${ref} holds ${count} entries`, file);
    const id = window[0];
    if (id === NO_COMMIT) throw md801(`${spelled} is the move that deleted ${ref}: it names no commit`, file);
    if (!this.hasCommit(id)) throw md801(`${spelled} names commit ${short(id)}, which is not in commits/`, file);
    return id;
  }

  // §13.3: HEAD (or @), a commit id, a branch, a tag, a remote-tracking ref or a unique prefix of at least
  // 4 digits (looked up in that order), or REF@{N} / @{N} (from a reflog), then ~N / ^ moves.
  async resolve(rev) {
    const m = REVISION.exec(rev);
    if (!m || (m[3] && m[1]) || !(m[1] || m[2] !== undefined || m[3])) throw md801(`${JSON.stringify(rev)} is not a revision`);
    const name = m[3] ? "HEAD" : m[1];
    let id;
    if (m[2] !== undefined) {
      // a count of more than 18 digits is past any reflog
      id = this.reflogTarget(name, m[2].length > 18 ? Number.MAX_SAFE_INTEGER : Number(m[2]));
    } else if (name === "HEAD") {
      id = this.head().id;
      if (id === null) throw md801("HEAD names a branch without commits");
    } else if (COMMIT_ID.test(name)) {
      // a full commit id always names that commit, whatever a file of refs/heads is called (§13.3)
      if (!this.hasCommit(name)) throw md801(`no commit ${short(name)} in commits/`);
      id = name;
    } else if ((id = this.branch(name)) !== null) {
      // a branch (which wins over a tag and a commit-id prefix of the same name); a tag of that name,
      // which no writer makes, is warned of (§13.3)
      if (this.hasTag(name)) {
        process.stderr.write(`mdiff-js: warning: ${JSON.stringify(name)} is a branch and a tag: the branch is meant (§13.3)\n`);
      }
    } else if ((id = this.tag(name)) !== null) {
      // a tag (which wins over a commit-id prefix of the same name)
    } else if ((id = this.tracking(name)) !== null) {
      // a remote-tracking ref, <remote>/<branch> (§13.8)
    } else if (PREFIX.test(name)) {
      const matches = this.commitIds().filter((c) => c.startsWith(name));
      if (matches.length !== 1) {
        throw md801(`${JSON.stringify(name)} names ${matches.length ? `${matches.length} commits` : "no commit"}`);
      }
      id = matches[0];
    } else {
      throw md801(`no branch, tag or commit ${JSON.stringify(name.slice(0, 80))}`);
    }
    for (const move of m[4].match(/~[0-9]*|\^/g) || []) {
      const steps = move === "^" || move === "~" ? 1 : Number(move.slice(1));
      for (let i = 0; i < steps; i++) {
        const parent = await this.firstParent(id);
        if (parent === null) throw md801(`${JSON.stringify(rev)} goes back past the root commit ${short(id)}`);
        id = parent;
      }
    }
    return id;
  }

  // §13.5: {state, files} of the snapshot of `id`, or null when there is none or this reader may not
  // (or need not) start there. A snapshot is a cache that nothing but the commits vouches for: it is
  // used only if it agrees with `claims` (what the commits' metadata say state(id) holds, below) — a
  // valid file of `replace` updates, `meta.snapshot_of` its name, `meta.inexact` absent or a JSON array
  // of strings naming exactly the inexact values, and the same parameters, shapes, dtypes, files and
  // layout as the claims, each exact value with the sha256 they record. A snapshot that does not agree
  // is MD807 and walked past. §13.5 lets a reader ignore any snapshot: mdiff-js also ignores those whose
  // state has inexact values (they would be replayed from the root anyway).
  async snapshot(id, claims) {
    const file = this.snapshotPath(id);
    try {
      this.checkFolders(file);
    } catch {
      return null;
    }
    if (kindOf(file) !== "a regular file") return null; // a link, a FIFO, ...: unusable (§13.1, §13.5)
    const v = await validateFile(file, { limits: this.limits });
    try {
      if (v.notHdf5 || v.errors.length) return null;
      if (!v.commit || !v.commit.meta || v.commit.meta.snapshot_of !== id) return null;
      const updates = [...v.params, ...v.files, ...(v.layout ? [v.layout] : [])];
      if (!updates.every((p) => p.update && p.update.type === "replace")) return null;
      const listed = inexactListed(v.commit.meta);
      if (listed === null) return null;
      if (disagreement(v, listed, claims) !== null) return null; // MD807
      if ([...claims.params.values()].some((c) => c.sha256 === null)) return null;
      return { state: await applyValidated(v, new Map()), files: applyFileUpdates(v, new Map()) };
    } catch {
      return null;
    } finally {
      v.close();
    }
  }

  // §13.4: state(C) = apply(C, state(first parent of C)); the empty state before a root. First a pass
  // over every commit's metadata from the root (§13.5): each update checked against the state it meets
  // (MD600/MD601 as MD802; MD805: an exact update that reads a value a low_rank update made), which
  // gives, at each commit, what the commits say its state holds — the claims a snapshot must agree
  // with. Then the updates are applied from the newest snapshot that agrees, or from the root. A state
  // also has files (§5.5), applied as §9.1 says; only the tensors are returned. Its layout (§5.6)
  // changes no parameter: each commit's is checked (MD307) with its data, and not kept.
  async state(id) {
    const chain = [];
    const seen = new Set();
    for (let cursor = id; cursor !== null; cursor = await this.firstParent(cursor)) {
      if (seen.has(cursor)) throw md801(`the first parents of ${short(id)} form a cycle at ${short(cursor)}`);
      seen.add(cursor);
      chain.push(cursor);
    }
    chain.reverse(); // root first
    const claims = { params: new Map(), files: new Map(), layout: null };
    const claimsAt = new Map(); // chain index -> a copy of the claims, where a snapshot file is
    const inexactBefore = []; // chain index -> the names whose value in the first parent's state is inexact
    for (let i = 0; i < chain.length; i++) {
      const cid = chain[i];
      inexactBefore.push(new Set([...claims.params].filter(([, c]) => c.sha256 === null).map(([n]) => n)));
      const { v, file, done } = await this.openVerified(cid, false);
      try {
        refuseInvalid(v, file);
        claimCommit(claims, v, cid);
      } catch (e) {
        if (e instanceof MdiffError && e.code === "MD805") throw e;
        const err = asMdiffError(e, file);
        throw new MdiffError("MD802", `commit ${short(cid)} cannot be applied to its first parent's state: ${err.code}: ${err.message}`, err.path || file);
      } finally {
        done();
      }
      if (kindOf(this.snapshotPath(cid)) === "a regular file") {
        claimsAt.set(i, { params: new Map(claims.params), files: new Map(claims.files), layout: claims.layout });
      }
      if (i === chain.length - 1 && v.commit && typeof v.commit.state_sha256 === "string") {
        const got = stateDigest(claims);
        if (got !== v.commit.state_sha256) {
          throw new MdiffError("MD808", `commit ${short(cid)} records state_sha256 ${short(v.commit.state_sha256)}…, but its first parent's state and its updates make a state whose digest is ${short(got)}… (§4.2)`);
        }
      }
    }
    let state = new Map();
    let files = new Map(); // path -> size in bytes
    let from = 0;
    for (const i of [...claimsAt.keys()].sort((a, b) => b - a)) {
      const snap = await this.snapshot(chain[i], claimsAt.get(i));
      if (snap !== null) {
        ({ state, files } = snap);
        from = i + 1;
        break;
      }
    }
    for (let i = from; i < chain.length; i++) {
      const cid = chain[i];
      const inexact = inexactBefore[i];
      const { v, file, done } = await this.openVerified(cid, true);
      try {
        refuseInvalid(v, file);
        const nextFiles = applyFileUpdates(v, files);
        // §9.2 lets a replay skip MD603; mdiff-js checks it for the values that are exact in the
        // state: a commit id ties a commit to its parent, but a snapshot (§13.5) is not hashed, and
        // a low_rank update has no result sha256 to catch a state that is not the one it was made
        // from. An inexact value's bits may differ between appliers, so its base_sha256 is not read.
        state = await applyValidated(v, state, { skipBaseCheckFor: inexact });
        files = nextFiles;
      } catch (e) {
        const err = asMdiffError(e, file);
        throw new MdiffError("MD802", `commit ${short(cid)} cannot be applied to its first parent's state: ${err.code}: ${err.message}`, err.path || file);
      } finally {
        done();
      }
    }
    return state;
  }
}

// §4.2 `state_sha256`: the sha256 of the state's digest object in canonical JSON (Appendix A): members
// sorted by code point, no whitespace, strings escaped as JSON.stringify does (", \ and controls).
const byCodePoint = (a, b) => {
  const x = Array.from(a), y = Array.from(b);
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    const d = x[i].codePointAt(0) - y[i].codePointAt(0);
    if (d !== 0) return d;
  }
  return x.length - y.length;
};
function canonical(value) {
  if (value === null || typeof value !== "object") return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`;
  const keys = Object.keys(value).sort(byCodePoint);
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonical(value[k])}`).join(",")}}`;
}
export function stateDigest(claims) {
  const parameters = Object.create(null); // a parameter may be named "__proto__"
  for (const [name, c] of claims.params) parameters[name] = { dtype: c.dtype, sha256: c.sha256, shape: c.shape.map(Number) };
  const files = Object.create(null);
  for (const [name, sha256] of claims.files) files[name] = sha256;
  const text = canonical({ files, layout: claims.layout, parameters });
  return crypto.createHash("sha256").update(Buffer.from(text, "utf8")).digest("hex");
}

// One commit's metadata against the claims of its first parent's state (§13.4), which it then updates
// to its own state's: MD805 for every update first, then MD600/MD601 for each. A parameter's claim is
// {dtype, shape, sha256}, sha256 null for an inexact value; a file's, its sha256; the layout's, its
// sha256 or null.
function claimCommit(claims, v, cid) {
  for (const prm of v.params) {
    const c = claims.params.get(prm.name);
    if (c && c.sha256 === null && EXACT_READS_BASE.has(prm.update.type)) {
      throw new MdiffError(
        "MD805",
        `commit ${short(cid)} holds a ${prm.update.type} update of ${JSON.stringify(prm.name)}, whose value in its first parent's state an inexact update (low_rank) made: appliers agree on that value only within a tolerance, so an exact update must not read it (§13.4)`,
        prm.name,
      );
    }
  }
  for (const prm of v.params) {
    const u = prm.update;
    const c = claims.params.get(prm.name);
    if (u.type !== "replace") {
      if (!c) throw new MdiffError("MD600", `the base has no parameter ${JSON.stringify(prm.name)} for this ${u.type} update`, prm.name);
      if (c.dtype !== u.dtype || !sameShape(c.shape, u.shape)) {
        throw new MdiffError("MD601", `the base parameter ${JSON.stringify(prm.name)} is ${c.dtype}[${c.shape.join(", ")}]; the ${u.type} update needs ${u.dtype}[${u.shape.join(", ")}]`, prm.name);
      }
    }
  }
  for (const prm of v.params) {
    const u = prm.update;
    if (u.type === "delete") claims.params.delete(prm.name);
    else claims.params.set(prm.name, { dtype: u.dtype, shape: u.shape.map(Number), sha256: INEXACT.has(u.type) ? null : u.sha256 });
  }
  for (const f of v.files) {
    const u = f.update;
    if (u.type === "delete") {
      if (!claims.files.has(f.name)) throw new MdiffError("MD600", `the base has no file ${JSON.stringify(f.name)} for this delete update`, f.path);
      claims.files.delete(f.name);
    } else {
      claims.files.set(f.name, u.sha256);
    }
  }
  if (v.layout) claims.layout = v.layout.update.type === "delete" ? null : v.layout.update.sha256;
}

function sameShape(a, b) {
  return a.length === b.length && a.every((x, i) => BigInt(x) === BigInt(b[i]));
}

// §13.5: why a snapshot (checked file `v`, its `meta.inexact` as the Set `listed`) disagrees with the
// claims of its commit's state (MD807), or null when it agrees.
function disagreement(v, listed, claims) {
  const held = new Map(v.params.map((p) => [p.name, p.update]));
  if (held.size !== claims.params.size) return "other parameters";
  for (const [name, c] of claims.params) {
    const u = held.get(name);
    if (!u) return `lacks ${JSON.stringify(name)}`;
    if (u.dtype !== c.dtype || !sameShape(u.shape, c.shape)) return `${JSON.stringify(name)}: another shape or dtype`;
    if (c.sha256 !== null && u.sha256 !== c.sha256) return `${JSON.stringify(name)}: another sha256`;
  }
  const inexact = [...claims.params].filter(([, c]) => c.sha256 === null).map(([n]) => n);
  if (listed.size !== inexact.length || !inexact.every((n) => listed.has(n))) return "another meta.inexact";
  if (v.files.length !== claims.files.size) return "other files";
  for (const f of v.files) if (claims.files.get(f.name) !== f.update.sha256) return `file ${JSON.stringify(f.name)}`;
  if ((v.layout ? v.layout.update.sha256 : null) !== claims.layout) return "another layout";
  return null;
}
