// The validator: every rule of SPEC.md §3-§8 that can be checked with h5wasm plus the raw
// reader of h5raw.js. See README.md for the rules it cannot check.

import crypto from "node:crypto";
import zlib from "node:zlib";
import { init, H5File, H5Error } from "./hdf5.js";
import { RawFile, RawError, UNDEF, datatypeProblem } from "./h5raw.js";
import { finding, MdiffError } from "./codes.js";
import { parseStrict, JSONError, isPlainObject, isInteger, describe } from "./json.js";
import { checkCommit, checkUpdate, UPDATE_TYPES, UPDATE_VERSIONS } from "./schema.js";
import { DTYPES, bitsStorage, computeDtype, storageName, sameStorage, numelOf, limitCountOf } from "./dtypes.js";
import { decodeName, compareUtf8 } from "./names.js";
import { pathProblem, pathCollisions } from "./paths.js";
import { layoutProblems } from "./layout.js";
import { positionsFromGaps } from "./deltas.js";
import { TYPE_NAME, FUNCTION_PREFIX, definitionProblem, checkFunction, checkShapes } from "./embedded.js";

// §8.3 limits; these are this reader's defaults (the reference defaults).
export const DEFAULT_LIMITS = {
  maxRank: 32,
  maxElements: 2n ** 36n,
  maxDatasetBytes: 2n ** 38n,
  maxAttributeBytes: 2 ** 20,
  maxObjects: 1_000_000,
  maxDepth: 32,
  maxTotalBytes: 2n ** 40n,
  maxFunctionBytes: 2 ** 20, // §7.8 check 1
  maxFunctionNodes: 256, // §7.8 check 6
  maxFunctionConstantBytes: 2 ** 20, // §7.8 check 6
};

const READER_MAJOR = 1;
const READER_MINOR = 3; // §3.3: this document (and this reader) defines version 1.3
const KNOWN_EXTENSIONS = new Set(); // versions 1.0 to 1.3 define none
const SUB_SINCE_MINOR = 3n; // §3.3: version 2 of dense and sparse (integer deltas, gaps) came with 1.3
// §5.7: the root members each version defines (besides /parameters and /update_types of 1.0)
const V1_1_GROUPS = ["files", "layout"];
const ALLOWED_FILTERS = new Set([1, 2, 3]);

export function sha256hex(buf) {
  return crypto.createHash("sha256").update(buf).digest("hex");
}

function join(parent, name) {
  return parent === "/" ? `/${name}` : `${parent}/${name}`;
}

// Datasets each update type defines: name -> (update) => {storage, shape}
function requiredDatasets(u) {
  const T = u.dtype;
  const shape = u.shape.map((d) => BigInt(d));
  switch (u.type) {
    case "dense":
      return u.version === 2 ? { sub: { storage: bitsStorage(T), shape } } : { xor: { storage: bitsStorage(T), shape } };
    case "sparse":
      return u.version === 2
        ? { gaps: { storage: DTYPES.uint64.storage, shape: null }, sub: { storage: bitsStorage(T), shape: null } }
        : { indices: { storage: DTYPES.uint64.storage, shape: null }, xor: { storage: bitsStorage(T), shape: null } };
    case "replace":
      return { value: { storage: DTYPES[T].storage, shape } };
    case "low_rank": {
      const C = DTYPES[computeDtype(T)].storage;
      return { A: { storage: C, shape: null }, B: { storage: C, shape: null } };
    }
    default:
      return {};
  }
}

// Whether a link name just listed, that then names no link (`e`), was not UTF-8: emscripten decodes the
// bytes of a name that is not UTF-8 leniently, without U+FFFD (a stray 0x80-0xBF byte opens a 4-byte
// sequence), into a string whose UTF-8 encoding is other bytes — so the listed name is not found. A name
// that is not found for another reason (an ASCII name, or a "/" in it) is an object that cannot be read.
function notUtf8Name(name, e) {
  // an ASCII name always decodes to itself: one that is not found has another cause (a damaged link index);
  // a NUL cannot be in a name (HDF5 ends names with it): emscripten makes one of a cut-short sequence
  return /not found|doesn.t exist|does not exist|not defined/i.test(String(e && e.message)) && /[^\x01-\x7f]/.test(name) && !name.includes("/");
}

export class Validation {
  constructor(path, limits = DEFAULT_LIMITS) {
    this.path = path;
    this.limits = limits;
    this.findings = [];
    this.h5 = null;
    this.raw = null;
    this.objects = []; // {path, kind, parent, name, attrs: Map name -> string|undefined}
    this.byPath = new Map();
    this.dsInfo = new Map(); // dataset path -> {meta, ok}
    this.params = []; // {name, path, update, ok}
    this.files = []; // §5.5: {name (the file's path), path, update, ok}
    this.layout = null; // §5.6: {path, update, ok, doc (the parsed layout, once its data is checked)}
    this.version = null; // {major, minor} of a well-formed format_version
    this.dataCache = new Map();
    this.strict = true;
    this.notHdf5 = false;
    this.embedded = new Map(); // §7.8: type name -> {definition, functions: Map dtype -> {model, key}}
  }

  add(code, path, message) {
    this.findings.push(finding(code, path, message));
  }

  get errors() {
    return this.findings.filter((f) => f.severity === "error");
  }

  close() {
    if (this.h5) this.h5.close();
    if (this.raw) this.raw.close();
  }

  async run({ data = true } = {}) {
    await init();
    try {
      this.h5 = new H5File(this.path);
    } catch (e) {
      this.notHdf5 = true;
      this.add("MD100", this.path, `not a readable HDF5 file: ${e.message}`);
      return this;
    }
    try {
      this.raw = new RawFile(this.path);
    } catch (e) {
      this.add("MD513", "/", `the file's superblock cannot be read: ${e.message}`);
    }
    this.walk();
    if (!this.stopped) this.checkAttributes();
    if (!this.stopped) this.checkDatasets();
    // SPEC §12.1: past a limit of the whole file (MD511, else MD512) nothing more is looked at or reported
    for (const code of ["MD511", "MD512"]) {
      if (this.findings.some((f) => f.code === code)) {
        this.findings = this.findings.filter((f) => f.code === code);
        return this;
      }
    }
    const versionOk = this.checkIdentity();
    if (versionOk) {
      this.checkCommit();
      this.checkMembers();
      this.checkFiles();
      this.checkWeightsLayout();
      if (data) this.checkData();
    }
    return this;
  }

  // §8.1: links, object kinds, objects reachable once; §8.3: object count.
  walk() {
    const seen = new Map(); // address -> path
    let count = 0;
    const root = { path: "/", kind: "group", parent: null, name: "", depth: 0, attrs: new Map() };
    try {
      root.addr = this.h5.address("/");
      seen.set(root.addr, "/");
    } catch {
      /* the root's address is only for MD514 */
    }
    const queue = [root];
    this.objects.push(root);
    this.byPath.set("/", root);
    count++;
    if (this.raw && root.addr !== undefined) {
      try {
        // SPEC §8.1: the root's object header is read as every other object's is at its link; a root that
        // cannot be read is refused whole, and nothing else of the file is looked at (§12.1)
        this.raw.linkCount(root.addr, "/");
      } catch (e) {
        this.add("MD513", "/", `the root group's object header cannot be read: ${e.message}`);
        root.refused = true;
        this.count = count;
        return;
      }
    }
    while (queue.length) {
      const g = queue.shift();
      let names;
      try {
        // SPEC §8.1: a dense link storage's index headers and a symbol table's local heap are checked before the
        // HDF5 library reads them, and the links the name index records are the links listed (libhdf5 sizes its
        // name-order table by it)
        const recorded = this.raw && g.addr !== undefined ? this.raw.checkedLinkCount(g.addr, g.path) : null;
        names = this.h5.keys(g.path);
        if (recorded !== null && names.length !== recorded) {
          throw new Error(`its name index records ${recorded} links, it holds ${names.length}`);
        }
      } catch (e) {
        // SPEC §12.1: a group whose links cannot be read is an object that cannot be read, refused whole:
        // its attributes and members are not looked at
        this.add("MD513", g.path, `the group's links cannot be read: ${e.message}`);
        g.refused = true;
        continue;
      }
      g.children = [];
      for (const name of names) {
        const p = join(g.path, name);
        if (name === "") {
          // a corrupt link with an empty name: it names no object (as a path it would name the group itself)
          this.add("MD513", p, "the link cannot be read: its name is empty");
          g.children.push({ name, path: p, kind: "refused" });
          continue;
        }
        let kind;
        try {
          kind = this.h5.linkKind(p);
        } catch (e) {
          // the link message's own type (compact storage): a link the library cannot query (an external link whose
          // value it cannot parse) is still not a hard link (SPEC §12.1 rule 3: MD500 comes before MD513)
          const recorded = this.linkTypes(g).get(name);
          if (recorded !== undefined && recorded !== 0 && name.isWellFormed() && !name.includes("\uFFFD")) {
            this.add("MD500", p, `${recorded === 1 ? "soft" : recorded === 64 ? "external" : "user-defined"} link; only hard links are allowed`);
            g.children.push({ name, path: p, kind: "link" });
            continue;
          }
          // the raw link messages settle it where the storage is compact: h5wasm decodes a name that is not UTF-8
          // with bytes past its end, so the name it lists differs from run to run (found by differential fuzzing)
          const raw = this.linkTypes(g);
          if (name.includes("\uFFFD") || !name.isWellFormed() || notUtf8Name(name, e) || (raw.notUtf8 > 0 && !raw.has(name))) {
            // h5wasm decodes link names as UTF-8, replacing bad bytes; the name then names nothing.
            this.add("MD302", p, "the link name is not valid UTF-8");
          } else {
            this.add("MD513", p, `the link cannot be read: ${e.message}`);
            g.children.push({ name, path: p, kind: "refused" });
          }
          continue;
        }
        if (kind !== "hard") {
          this.add("MD500", p, `${kind === "user" ? "user-defined" : kind} link; only hard links are allowed`);
          g.children.push({ name, path: p, kind: "link" });
          continue;
        }
        if (g.depth >= this.limits.maxDepth) {
          // §8.3: the depth limit bounds every path this walk builds; nothing deeper is opened
          this.add("MD511", p, `objects nested more than ${this.limits.maxDepth} links below the root`);
          this.stopped = true;
          return;
        }
        let okind;
        let addr;
        try {
          okind = this.h5.objectKind(p);
          addr = this.h5.address(p);
          // SPEC §12.1 rules 2, 3: an object that cannot be opened is refused at its link (MD513) and counts nothing;
          // the library names a dataset's or a committed datatype's kind without opening it, so it is opened here
          if (okind === "dataset") this.h5.datasetMeta(p);
          else if (okind === "datatype") this.h5.datatypeMeta(p);
        } catch (e) {
          this.add("MD513", p, `the object cannot be read: ${e.message}`);
          g.children.push({ name, path: p, kind: "refused" });
          continue;
        }
        // §8.1: an object reached a second time, or whose header counts more than one link, is refused at
        // every link (so the first link of two, whose count is 2, is refused too: SPEC §12.1)
        let links = 1;
        if (this.raw && !seen.has(addr)) {
          try {
            links = this.raw.linkCount(addr, p);
          } catch (e) {
            this.add("MD513", p, `the object header cannot be read: ${e.message}`);
            g.children.push({ name, path: p, kind: "refused" });
            continue;
          }
        }
        if (seen.has(addr) || links !== 1) {
          const first = seen.get(addr);
          this.add("MD514", p, first ? `the object is also linked as ${first}${first === "/" ? " (a cycle)" : ""}` : `the object's header counts ${links} links to it`);
          g.children.push({ name, path: p, kind: "duplicate" });
          continue;
        }
        if (okind === "datatype" && this.raw) {
          try {
            this.raw.checkCommittedDatatype(addr, p); // SPEC §12.1 rule 3: an object that cannot be read is MD513 first
          } catch (e) {
            this.add("MD513", p, `the object cannot be read: ${e.message}`);
            g.children.push({ name, path: p, kind: "refused" });
            continue;
          }
        }
        if (okind === "datatype") {
          this.add("MD501", p, "a committed datatype; only groups and datasets are allowed");
          g.children.push({ name, path: p, kind: "datatype" });
          continue;
        }
        if (okind === "other") {
          this.add("MD501", p, "an object that is neither a group nor a dataset");
          g.children.push({ name, path: p, kind: "other" });
          continue;
        }
        seen.set(addr, p);
        const obj = { path: p, kind: okind, parent: g, name, addr, depth: g.depth + 1, attrs: new Map() };
        g.children.push(obj);
        this.objects.push(obj);
        this.byPath.set(p, obj);
        if (++count > this.limits.maxObjects) {
          this.add("MD511", p, `more than ${this.limits.maxObjects} objects and attributes`);
          this.stopped = true;
          return;
        }
        if (okind === "group") queue.push(obj);
      }
    }
    this.count = count;
  }

  // The link types the raw object header of group `g` records (compact storage), read once per group.
  linkTypes(g) {
    if (!g.linkTypes) {
      g.linkTypes = new Map();
      if (this.raw && g.addr !== undefined) {
        try {
          g.linkTypes = this.raw.linkTypes(g.addr, g.path);
        } catch {
          /* the group's links were listed: what cannot be read here is the library's to decide */
        }
      }
    }
    return g.linkTypes;
  }

  // §8.2 attributes (MD506), §8.3 (MD510, MD511).
  checkAttributes() {
    let count = this.count || 0;
    for (const obj of this.objects) {
      if (obj.refused) continue; // its links cannot be read (MD513): refused whole
      // the object header's own count first (§8.1: its dense storage's B-tree header is checked before
      // libhdf5 reads it), and the limit of 64 on it (§8.3) before h5wasm lists them
      let stored = null;
      if (this.raw && obj.addr !== undefined) {
        try {
          stored = this.raw.attributeCount(obj.addr, obj.path);
        } catch (e) {
          this.add("MD513", obj.path, `the attributes cannot be read: ${e.message}`);
          obj.refused = true;
          continue;
        }
        if (stored > 64) {
          this.add("MD511", obj.path, `${stored} attributes on one object (at most 64)`);
          this.stopped = true;
          return;
        }
      }
      let names;
      try {
        names = this.h5.attrNames(obj.path);
      } catch (e) {
        this.add("MD513", obj.path, `the attributes cannot be read: ${e.message}`);
        obj.refused = true; // an object that cannot be read (SPEC §12.1): nothing else looks at it
        continue;
      }
      // h5wasm lists the attributes it could read and drops the rest without an error: a count from the
      // object header that is larger says some cannot be read (§8.1, MD513; the others are still used)
      if (stored === null) stored = names.length;
      if (stored > names.length) this.add("MD513", obj.path, `${stored - names.length} of ${stored} attributes cannot be read`);
      count += Math.max(stored, names.length);
      if (Math.max(stored, names.length) > 64) {
        // §8.3: at most 64 attributes on one object (a fixed limit)
        this.add("MD511", obj.path, `${Math.max(stored, names.length)} attributes on one object (at most 64)`);
        this.stopped = true;
        return;
      }
      if (count > this.limits.maxObjects) {
        this.add("MD511", obj.path, `more than ${this.limits.maxObjects} objects and attributes`);
        this.stopped = true;
        return;
      }
      let spaces = new Map();
      if (this.raw && obj.addr !== undefined) {
        try {
          spaces = this.raw.attributeSpaces(obj.addr, obj.path);
        } catch {
          /* read once already by attributeCount: the library's reading decides */
        }
      }
      for (const name of names) {
        // §8.2: an attribute's name is UTF-8 (h5wasm decodes a name that is not with replacement characters)
        if (name.includes("\uFFFD") || !name.isWellFormed()) {
          this.add("MD506", obj.path, `an attribute name ${describe(name)} is not UTF-8`);
          obj.attrs.set(name, undefined);
          continue;
        }
        let meta;
        try {
          meta = this.h5.attrMeta(obj.path, name);
        } catch (e) {
          // the raw attribute messages settle it where they hold a name that is not UTF-8: h5wasm decodes such a
          // name with bytes past its end, so the name it lists differs from run to run (found by differential fuzzing)
          if (notUtf8Name(name, e) || (spaces.notUtf8 > 0 && !spaces.has(name))) {
            this.add("MD506", obj.path, `an attribute name ${describe(name)} is not UTF-8`);
          } else this.add("MD513", obj.path, `attribute '${name}' cannot be read: ${e.message}`);
          obj.attrs.set(name, undefined);
          continue;
        }
        const isString = meta.type === 3 && !meta.vlen && (meta.cset === 0 || meta.cset === 1);
        // §8.2: scalar by the dataspace message's class (h5wasm shows a class it does not know as a scalar)
        const scalar = Array.isArray(meta.shape) && meta.shape.length === 0 && (spaces.get(name) ?? 0) === 0;
        if (!isString || !scalar) {
          this.add("MD506", obj.path, `attribute '${name}' is not a scalar fixed-length UTF-8 string`);
          obj.attrs.set(name, undefined);
          continue;
        }
        const nbytes = meta.size * meta.total_size;
        if (nbytes > this.limits.maxAttributeBytes) {
          this.add("MD510", obj.path, `attribute '${name}' has ${nbytes} bytes; the limit is ${this.limits.maxAttributeBytes}`);
          obj.attrs.set(name, undefined);
          continue;
        }
        let bytes;
        try {
          bytes = this.h5.attrBytes(obj.path, name, meta);
        } catch (e) {
          this.add("MD513", obj.path, `attribute '${name}' cannot be read: ${e.message}`);
          obj.attrs.set(name, undefined);
          continue;
        }
        let end = bytes.length;
        while (end > 0 && bytes[end - 1] === 0) end--;
        let text;
        try {
          text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(bytes.subarray(0, end));
        } catch {
          this.add("MD506", obj.path, `attribute '${name}' is not valid UTF-8`);
          obj.attrs.set(name, undefined);
          continue;
        }
        obj.attrs.set(name, text);
      }
    }
  }

  // §8.2 datasets (MD502-MD505), §8.3 limits (MD507-MD509, MD512). SPEC §12.1: a dataset is checked in
  // this order and refused at the first rule it breaks, with that one finding; a refused dataset is
  // marked (obj.refused) so that no other rule looks at it, and adds nothing to the total of MD512.
  checkDatasets() {
    let total = 0n;
    const L = this.limits;
    for (const obj of this.objects) {
      if (obj.kind !== "dataset") continue;
      const p = obj.path;
      const info = { ok: false };
      this.dsInfo.set(p, info);
      const problem = this.datasetProblem(p, info);
      if (problem) {
        this.add(problem[0], p, problem[1]);
        obj.refused = true;
        continue;
      }
      info.ok = true;
      total += numelOf(info.meta.shape) * BigInt(info.meta.size); // an empty dataset adds 0
    }
    if (total > L.maxTotalBytes) this.add("MD512", "/", `the datasets declare ${total} bytes; the limit is ${L.maxTotalBytes}`);
  }

  // [code, message] of the first rule of §8.2-§8.3 the dataset at `p` breaks, or null.
  datasetProblem(p, info) {
    const L = this.limits;
    let meta;
    let filters;
    let raw = null;
    try {
      meta = this.h5.datasetMeta(p);
      filters = this.h5.datasetFilters(p) || [];
      if (this.raw) raw = this.raw.datasetInfo(this.byPath.get(p).addr, p);
    } catch (e) {
      return ["MD513", `the dataset's header cannot be read: ${e.message}`];
    }
    info.meta = meta;
    if ((raw && raw.layout && raw.layout.cls === 3) || (meta.virtual_sources && meta.virtual_sources.length)) {
      return ["MD503", "virtual dataset"];
    }
    if (raw && raw.external) return ["MD502", "external raw storage"];
    const bad = filters.filter((f) => !ALLOWED_FILTERS.has(f.id));
    if (bad.length) return ["MD504", `filter ${bad[0].id} (${bad[0].name}) is not among deflate (1), shuffle (2), fletcher32 (3)`];
    // §8.2: the parameters every HDF5 library decodes with: deflate one level of at most 9, shuffle one size not 0
    for (const f of filters) {
      const v = f.cd_values || [];
      if ((f.id === 1 && (v.length !== 1 || v[0] > 9)) || (f.id === 2 && (v.length !== 1 || v[0] === 0))) {
        return ["MD504", `the ${f.id === 1 ? "deflate" : "shuffle"} filter has the parameters [${v.join(", ")}]`];
      }
    }
    if (raw && raw.sharedDatatype && raw.sharedDatatype.committed) return ["MD501", "the dataset uses a committed datatype"];
    let typeProblem = null;
    if (meta.type !== 0 && meta.type !== 1) typeProblem = `datatype class ${meta.type}`;
    else if (meta.type === 0 && ![1, 2, 4, 8].includes(meta.size)) typeProblem = `an integer of ${meta.size} bytes`;
    else if (meta.type === 1 && ![4, 8].includes(meta.size)) typeProblem = `a float of ${meta.size} bytes`;
    else if (!meta.littleEndian) typeProblem = "a big-endian datatype"; // §8.2: one byte too (HDF5 records an order)
    else if (raw && raw.datatype) typeProblem = datatypeProblem(raw.datatype);
    if (typeProblem) return ["MD505", `datatype is not a little-endian IEEE float or two's-complement integer: ${typeProblem}`];
    if (meta.shape === null || meta.shape === undefined) return ["MD505", "null dataspace"];
    const shape = meta.shape;
    const maxshape = meta.maxshape;
    if (shape.length && maxshape && (maxshape.length !== shape.length || maxshape.some((d, i) => d !== shape[i]))) {
      return ["MD509", "the dataset is extendible (its maximum shape is not its shape)"];
    }
    if (shape.length > L.maxRank) return ["MD507", `rank ${shape.length} exceeds the limit ${L.maxRank}`];
    const numel = numelOf(shape);
    // §8.3: the element and byte limits count a dimension of 0 as 1
    const counted = limitCountOf(shape);
    if (counted > L.maxElements || counted * BigInt(meta.size) > L.maxDatasetBytes) {
      return ["MD508", `${counted} elements${counted !== numel ? " (a dimension of 0 counted as 1)" : ""}, ${counted * BigInt(meta.size)} bytes exceed the limits (${L.maxElements} elements, ${L.maxDatasetBytes} bytes)`];
    }
    if (process.env.MDIFF_JS_DEBUG && raw) process.stderr.write(`${p}: layout ${JSON.stringify(raw.layout, (k, x) => (k === "data" ? undefined : x))}\n`);
    if (numel >= 1n && raw && raw.layout) {
      const bytes = numel * BigInt(meta.size);
      const problems = this.storageProblems(raw.layout, meta, filters, Number(bytes), p);
      if (problems.length) {
        if (problems[0].startsWith("MD513:")) return ["MD513", problems[0].slice(6)];
        // as SPEC §12.1 orders them: too few chunks (MD509), else a chunk that skips a filter (MD504)
        const skips = problems.filter((x) => x.startsWith("MD504:"));
        const counted = problems.some((x) => x.startsWith("COUNT:"));
        if (skips.length && !counted) return ["MD504", skips[0].slice(6)];
        return ["MD509", `declares ${bytes} bytes; ${problems.filter((x) => !x.startsWith("MD504:")).map((x) => x.replace(/^COUNT:/, "")).join("; ")}`];
      }
    }
    return null;
  }

  storageProblems(layout, meta, filters, declared, p) {
    try {
      if (layout.cls === 0) return []; // compact: the data is in the object header
      if (layout.cls === 1) {
        if (layout.address === UNDEF) return ["0 are stored within the file (the storage is not allocated)"];
        const size = layout.size === undefined ? declared : layout.size;
        if (size < declared) return [`only ${size} bytes of storage are allocated`];
        if (!this.raw.within(layout.address, size)) return ["the contiguous storage does not end within the file"];
        return [];
      }
      if (layout.cls === 2) {
        const deflate = filters.some((f) => f.id === 1);
        const found = []; // every chunk is decoded here first (checkInflation): filtered or not, to exactly its size
        const fletcher32 = filters.some((f) => f.id === 3);
        const problems = this.raw.checkChunks(layout, meta.shape, meta.maxshape, meta.size, deflate, filters.length > 0, p, found, fletcher32);
        if (found && !problems.length) {
          const chunkBytes = layout.chunk.reduce((a, b) => a * b, 1) * meta.size;
          this.dsInfo.get(p).chunked = { chunks: found, filters, chunkBytes };
        }
        return problems;
      }
      return [];
    } catch (e) {
      // an index an HDF5 library cannot read either (its nodes or keys do not decode): a part of the header that
      // a check needs cannot be read (SPEC §12.1 rule 3: MD513)
      if (e instanceof RawError) return [`MD513:the chunk index cannot be read: ${e.message}`];
      throw e;
    }
  }

  // §3.2-§3.4. Returns false when the rest of the file cannot be interpreted (MD103).
  checkIdentity() {
    const root = this.byPath.get("/");
    const a = root.attrs;
    if (root.refused) return false; // its attributes cannot be read (MD513)
    // SPEC §12.1: without a readable `format` and `format_version` nothing else can be read as mdiff 1.x;
    // a refused one (MD506/MD510/MD513) was reported once, under §8
    if ((a.has("format") && a.get("format") === undefined) || (a.has("format_version") && a.get("format_version") === undefined)) return false;
    if (a.get("format") !== "mdiff") {
      this.add("MD101", "/", `\`format\` is ${a.has("format") ? describe(a.get("format")) : "missing"}, not "mdiff"`);
      return false;
    }
    const v = a.get("format_version");
    let ok = true;
    const m = typeof v === "string" ? /^(0|[1-9][0-9]{0,8})\.(0|[1-9][0-9]{0,8})$/.exec(v) : null; // §3.2: 1-9 digits each
    if (!m) {
      this.add("MD102", "/", `\`format_version\` is ${a.has("format_version") ? describe(v) : "missing"}, not MAJOR.MINOR`);
      return false;
    } else {
      const major = BigInt(m[1]);
      const minor = BigInt(m[2]);
      this.version = { major, minor };
      if (major !== BigInt(READER_MAJOR)) {
        this.add("MD103", "/", `format version ${v}: this reader reads ${READER_MAJOR}.x`);
        return false; // SPEC §12.1 rule 4: MD103 ends the checks of §3-§7, `extensions` (MD105-MD107) among them
      } else if (minor > BigInt(READER_MINOR)) {
        this.add("MD104", "/", `format version ${v} is newer than ${READER_MAJOR}.${READER_MINOR}; unknown members are ignored`);
        this.strict = false;
      }
    }
    if (a.has("extensions") && a.get("extensions") !== undefined) {
      const raw = a.get("extensions");
      let ext = null;
      let why = null;
      if (raw === undefined) why = "it is not a string";
      else {
        try {
          ext = parseStrict(raw);
        } catch (e) {
          why = `it is not valid JSON: ${e.message}`;
        }
      }
      if (!why) {
        if (!Array.isArray(ext)) why = "it is not a JSON array";
        else {
          const names = new Set();
          for (const e of ext) {
            if (!isPlainObject(e) || typeof e.name !== "string" || typeof e.must_understand !== "boolean") {
              why = "an element is not an object with a string `name` and a boolean `must_understand`";
              break;
            }
            if (names.has(e.name)) {
              why = `the name ${describe(e.name)} appears twice`;
              break;
            }
            names.add(e.name);
          }
        }
      }
      if (why) this.add("MD105", "/", `\`extensions\` is malformed: ${why}`);
      else {
        for (const e of ext) {
          if (KNOWN_EXTENSIONS.has(e.name)) continue;
          if (e.must_understand) this.add("MD106", "/", `extension ${describe(e.name)} must be understood; this reader does not know it`);
          else this.add("MD107", "/", `optional extension ${describe(e.name)} is ignored`);
        }
      }
    }
    for (const [name, value] of a) {
      if (value !== undefined && !["format", "format_version", "commit", "extensions"].includes(name)) this.add("MD303", "/", `unknown attribute '${name}'`);
    }
    return ok;
  }

  // §4
  checkCommit() {
    const a = this.byPath.get("/").attrs;
    const raw = a.get("commit");
    if (!a.has("commit")) {
      this.add("MD200", "/", "root attribute `commit` is missing");
      return;
    }
    if (raw === undefined) return; // present but not a readable UTF-8 string: MD506/MD510/MD513 said so
    let c;
    try {
      c = parseStrict(raw);
    } catch (e) {
      this.add("MD201", "/", `\`commit\` is not valid JSON: ${e.message}`);
      return;
    }
    if (!isPlainObject(c)) {
      this.add("MD201", "/", `\`commit\` is a JSON ${Array.isArray(c) ? "array" : typeof c}, not an object`);
      return;
    }
    this.commit = c;
    const errs = checkCommit(c, this.strict, this.version ? this.version.minor : null);
    if (errs.length) this.add("MD202", "/", `commit metadata is invalid: ${errs.join("; ")}`);
  }

  // §5.1-§5.4, §5.7, §7.1 metadata, §7.3-§7.7 dataset shapes and types.
  checkMembers() {
    const root = this.byPath.get("/");
    for (const ch of root.children || []) {
      if (ch.name === "parameters" || !(ch.kind === "group" || ch.kind === "dataset") || ch.refused) continue;
      if (V1_1_GROUPS.includes(ch.name)) {
        // §3.3: /files and /layout came with 1.1; a file that says 1.0 cannot hold them
        if (this.version && this.version.major === 1n && this.version.minor === 0n) {
          this.add("MD306", ch.path, `a format version 1.0 file has \`/${ch.name}\` (§5.7: version 1.1)`);
        }
        continue; // checked by checkFiles() and checkWeightsLayout()
      }
      if (ch.name === "update_types") {
        this.checkUpdateTypes(ch);
        continue;
      }
      this.add("MD303", ch.path, "unknown root member");
    }
    const params = (root.children || []).find((c) => c.name === "parameters");
    if (!params) {
      this.add("MD300", "/parameters", "group `/parameters` is missing");
      return;
    }
    if (params.refused) return; // reported once, under §8 (SPEC §12.1)
    if (params.kind !== "group") {
      if (params.kind === "dataset" && !params.refused) this.add("MD300", "/parameters", "`/parameters` is a dataset, not a group");
      return; // links and other kinds were reported by walk()
    }
    this.unknownAttributes(params);
    const entries = [];
    for (const ch of params.children || []) {
      if (ch.refused) continue; // reported once, under §8
      if (ch.kind !== "group" && ch.kind !== "dataset") continue; // reported already (MD500, MD501, MD514)
      // SPEC §12.1 rule 4: a member's name first (MD302: nothing else of it is looked at), then its kind
      let pname;
      try {
        pname = decodeName(ch.name);
      } catch (e) {
        this.add("MD302", ch.path, `link name ${describe(ch.name)}: ${e.message}`);
        continue;
      }
      if (ch.kind === "dataset") {
        this.add("MD301", ch.path, "a dataset; every member of /parameters must be a group");
        continue;
      }
      entries.push({ name: pname, group: ch });
    }
    entries.sort((x, y) => compareUtf8(x.name, y.name));
    for (const { name, group } of entries) {
      const u = this.checkUpdate(group);
      this.params.push({ name, path: group.path, group, update: u ? u.update : null, ok: !!(u && u.ok) });
    }
  }

  isVersion1_0() {
    return !!this.version && this.version.major === 1n && this.version.minor === 0n;
  }

  // §5.5: /files, a group of file groups, each named by its path (encoded as §5.2) and holding an
  // update of the file's bytes. Paths must be safe, and not collide with each other (MD304).
  checkFiles() {
    const root = this.byPath.get("/");
    const files = (root.children || []).find((c) => c.name === "files");
    if (!files || files.refused || this.isVersion1_0()) return; // a 1.0 file's `/files` is MD306, not looked into
    if (files.kind === "dataset") {
      if (!files.refused) this.add("MD305", files.path, "`/files` is a dataset; it must be a group of file groups (§5.5)");
      return;
    }
    if (files.kind !== "group") return; // links and other kinds were reported by walk()
    this.unknownAttributes(files);
    const entries = [];
    for (const ch of files.children || []) {
      if (ch.refused) continue; // reported once, under §8
      if (ch.kind !== "group" && ch.kind !== "dataset") continue; // reported already (MD500, MD501, MD514)
      // SPEC §12.1 rule 4: a member's name first (MD302: nothing else of it is looked at), then its kind
      let fpath;
      try {
        fpath = decodeName(ch.name);
      } catch (e) {
        this.add("MD302", ch.path, `link name ${describe(ch.name)}: ${e.message}`);
        continue;
      }
      if (ch.kind === "dataset") {
        this.add("MD301", ch.path, "a dataset; every member of /files must be a group");
        continue;
      }
      const why = pathProblem(fpath);
      if (why) this.add("MD304", ch.path, `the file path ${describe(fpath)} is not safe: ${why}`);
      entries.push({ name: fpath, group: ch, safe: !why });
    }
    entries.sort((x, y) => compareUtf8(x.name, y.name));
    const safe = new Map(entries.filter((e) => e.safe).map((e) => [e.name, e]));
    for (const { path, why } of pathCollisions([...safe.keys()])) {
      this.add("MD304", safe.get(path).group.path, `the file path ${describe(path)} collides with another: ${why}`);
    }
    for (const { name, group } of entries) {
      const u = this.checkUpdate(group, "file");
      this.files.push({ name, path: group.path, group, update: u ? u.update : null, ok: !!(u && u.ok) });
    }
  }

  // §5.6: /layout, a group holding an update of the layout's bytes (its JSON is checked with the data).
  checkWeightsLayout() {
    const root = this.byPath.get("/");
    const g = (root.children || []).find((c) => c.name === "layout");
    if (!g || g.refused || this.isVersion1_0()) return; // a 1.0 file's `/layout` is MD306, not looked into
    if (g.kind === "dataset") {
      if (!g.refused) this.add("MD305", g.path, "`/layout` is a dataset; it must be a group holding a replace or delete update (§5.6)");
      return;
    }
    if (g.kind !== "group") return; // links and other kinds were reported by walk()
    const u = this.checkUpdate(g, "layout");
    this.layout = { path: g.path, group: g, update: u ? u.update : null, ok: !!(u && u.ok), doc: null };
  }

  // §7.8: /update_types, the update types the file defines; each one that breaks no rule is kept
  // in this.embedded (MD420 for the group, its name, definition and datasets' kind; MD421-MD427 for
  // a function's bytes, by embedded.js).
  checkUpdateTypes(ch) {
    if (ch.refused) return; // it cannot be read (MD513): reported once, under §8 (SPEC §12.1)
    if (ch.kind !== "group") {
      if (ch.kind === "dataset") this.add("MD420", ch.path, "`/update_types` must be a group");
      return;
    }
    // a refused attribute (undefined: MD506, MD510, MD513) is not unknown (SPEC §12.1 rule 3)
    for (const [a, v] of [...ch.attrs].sort()) if (v !== undefined) this.add("MD303", ch.path, `unknown attribute '${a}'`);
    for (const g of ch.children || []) {
      if (!(g.kind === "group" || g.kind === "dataset") || g.refused) continue; // refused, reported once (§12.1)
      let name;
      try {
        name = decodeName(g.name);
      } catch (e) {
        this.add("MD302", g.path, `link name ${describe(g.name)}: ${e.message}`);
        continue;
      }
      if (g.kind !== "group" || !TYPE_NAME.test(name) || UPDATE_TYPES.includes(name)) {
        this.add("MD420", g.path, `an update type is a group named x-... (lower case), not ${describe(name)}`);
        continue;
      }
      for (const [a, v] of [...g.attrs].sort()) if (a !== "definition" && v !== undefined) this.add("MD303", g.path, `unknown attribute '${a}'`);
      const raw = g.attrs.get("definition");
      let def;
      try {
        if (raw === undefined) throw new Error("missing");
        def = parseStrict(raw);
      } catch (e) {
        this.add("MD420", g.path, `attribute \`definition\` is missing or not JSON: ${e.message}`);
        continue;
      }
      const why = definitionProblem(def);
      if (why) {
        this.add("MD420", g.path, `\`definition\` breaks its schema: it ${why}`);
        continue;
      }
      const functions = new Map();
      let broken = false;
      for (const m of g.children || []) {
        if (!(m.kind === "group" || m.kind === "dataset") || m.refused) {
          // refused, reported once (§12.1): not unknown; a refused function leaves the type without it — a
          // function.<dtype> of a dtype of §6.1 only: another name is an unknown member (SPEC §7.8), refused
          if (m.name.startsWith(FUNCTION_PREFIX) && m.name.slice(FUNCTION_PREFIX.length) in DTYPES) broken = true;
          continue;
        }
        const dtype = m.name.startsWith(FUNCTION_PREFIX) ? m.name.slice(FUNCTION_PREFIX.length) : null;
        if (dtype === null || !(dtype in DTYPES)) {
          this.add("MD303", m.path, "unknown member of an update type");
          continue;
        }
        const info = m.kind === "dataset" ? this.dsInfo.get(m.path) : null;
        if (m.kind === "group") {
          this.add("MD420", m.path, "a function is a 1-D uint8 dataset of ONNX model bytes, not a group");
          broken = true;
          continue;
        }
        if (!info || !info.ok || !info.meta || !info.meta.shape) {
          broken = true; // refused by walk() or checkDatasets() (§8.2, §8.3), which said why
          continue;
        }
        const meta = info.meta;
        if (meta.type !== 0 || meta.size !== 1 || meta.signed || meta.shape.length !== 1) {
          this.add("MD420", m.path, "a function is a 1-D uint8 dataset of ONNX model bytes");
          broken = true;
          continue;
        }
        if (BigInt(meta.shape[0]) > BigInt(this.limits.maxFunctionBytes)) {
          this.add("MD421", m.path, `${meta.shape[0]} bytes (limit ${this.limits.maxFunctionBytes})`);
          broken = true;
          continue;
        }
        let bytes;
        try {
          bytes = this.data(m.path);
        } catch (e) {
          this.add("MD513", m.path, `the function cannot be read: ${e.message}`);
          broken = true;
          continue;
        }
        const { model, problems } = checkFunction(bytes, dtype, def.inputs, this.limits);
        for (const [code, message] of problems) this.add(code, m.path, message);
        if (model === null) broken = true;
        else functions.set(dtype, { model, key: sha256hex(bytes) });
      }
      if (!functions.size && !broken) this.add("MD420", g.path, "an update type needs at least one function.<dtype> dataset");
      if (!broken && functions.size) this.embedded.set(name, { definition: def, functions });
    }
  }

  // `kind` is "parameter", or "file" / "layout" for the updates of §5.5-§5.6: a `replace` or
  // `delete` of a uint8 vector (MD305), otherwise subject to every rule of §7 and §8.
  checkUpdate(g, kind = "parameter") {
    const p = g.path;
    this.unknownAttributes(g, ["update"]);
    const raw = g.attrs.get("update");
    const members = new Map((g.children || []).map((c) => [c.name, c]));
    const report = () => {
      for (const c of members.values()) {
        if ((c.kind === "group" || c.kind === "dataset") && !c.refused) {
          this.add("MD303", c.path, "unknown member");
          if (c.kind === "dataset") this.unknownAttributes(c);
        }
      }
    };
    if (!g.attrs.has("update")) {
      this.add("MD400", p, "attribute `update` is missing");
      return null;
    }
    if (raw === undefined) return null; // present but unusable: MD506/MD510/MD513 said so
    let u;
    try {
      u = parseStrict(raw);
    } catch (e) {
      this.add("MD401", p, `\`update\` is not valid JSON: ${e.message}`);
      return null;
    }
    if (!isPlainObject(u)) {
      this.add("MD401", p, `\`update\` is a JSON ${Array.isArray(u) ? "array" : typeof u}, not an object`);
      return null;
    }
    if (typeof u.type !== "string") {
      this.add("MD404", p, "`update` has no string member `type`");
      return null;
    }
    // §5.5: a type is looked at once it is a string (MD404 before); any but replace/delete is MD305
    if (kind !== "parameter" && u.type !== "replace" && u.type !== "delete") {
      this.add("MD305", p, `the ${kind} update has type ${describe(u.type)}; ${kind === "file" ? "a file" : "the layout"} is set (replace) or removed (delete), never patched`);
      return null;
    }
    // §7.8: a type the file defines (and that passed its checks) is known too, for parameters
    const emb = kind === "parameter" && Object.hasOwn(u, "type") ? this.embedded.get(u.type) : undefined;
    if (!UPDATE_TYPES.includes(u.type) && !emb) {
      const refused = u.type.startsWith("x-") ? " (a type /update_types does not define, or defines with errors, §7.8)" : "";
      this.add("MD402", p, `unknown update type ${describe(u.type)}; known: ${[...UPDATE_TYPES, ...this.embedded.keys()].join(", ")}${refused}`);
      return null;
    }
    const versions = emb ? [emb.definition.version] : UPDATE_VERSIONS[u.type];
    if (emb && isInteger(u.version) && typeof u.version !== "boolean" && !versions.some((v) => BigInt(v) === BigInt(u.version))) {
      this.add("MD403", p, `${u.type} version ${describe(u.version)} is not supported (the file defines ${versions[0]})`);
      return null;
    }
    if (!("version" in u) || !isInteger(u.version)) {
      this.add("MD404", p, `\`update\` breaks the ${u.type} schema: \`version\` is ${"version" in u ? describe(u.version) : "missing"}, not an integer`);
      return null;
    }
    if (!versions.some((v) => BigInt(v) === BigInt(u.version))) {
      this.add("MD403", p, `${u.type} version ${describe(u.version)} is not supported (this reader knows ${versions.join(", ")})`);
      return null;
    }
    const errs = checkUpdate(u, this.strict, this.version ? this.version.minor : null, emb ? { exact: emb.definition.exact } : null);
    if (Number(u.version) === 2 && (u.type === "dense" || u.type === "sparse")) {
      u.version = 2; // 2.0 is 2 (§4.1); the datasets below are chosen by it
      if (this.version && this.version.minor < SUB_SINCE_MINOR) {
        this.add("MD403", p, `${u.type} version 2 exists from format version 1.${SUB_SINCE_MINOR} (§3.3); this file says 1.${this.version.minor}`);
        return null;
      }
      if (u.dtype === "bool") {
        this.add("MD403", p, `a bool parameter's ${u.type} update is version 1 (XOR, §7.1), not 2`);
        return null;
      }
    }
    if (errs.length) {
      this.add("MD404", p, `\`update\` breaks the ${u.type} schema: ${errs.join("; ")}`);
      return null;
    }
    // §5.5: once the update matches its schema, a file's or the layout's is of a uint8 vector
    if (kind !== "parameter" && (u.dtype !== "uint8" || u.shape.length !== 1)) {
      this.add("MD305", p, `the ${kind} update is of ${describe(u.dtype)}[${u.shape.join(", ")}]; ${kind === "file" ? "a file" : "the layout"} is a uint8 vector (dtype "uint8", a shape of rank 1)`);
      return null;
    }
    // §8.3: the limits of a dataset apply to the shape an update declares too (counted the same way, each
    // with its own code); nothing is compared with a refused shape (SPEC §12.1)
    if (u.shape.length > this.limits.maxRank) {
      this.add("MD507", p, `the update declares rank ${u.shape.length}; the limit is ${this.limits.maxRank}`);
      return null;
    }
    const declared = limitCountOf(u.shape);
    if (declared > this.limits.maxElements || declared * BigInt(DTYPES[u.dtype].size) > this.limits.maxDatasetBytes) {
      this.add("MD508", p, `the update declares shape [${u.shape.join(", ")}]: ${declared} elements exceed the limits (${this.limits.maxElements} elements, ${this.limits.maxDatasetBytes} bytes)`);
      return null;
    }
    if (emb) return this.checkEmbeddedUpdate(g, u, emb, members);
    if (u.type === "low_rank" && (!DTYPES[u.dtype].float || u.shape.length === 0)) {
      this.add("MD411", p, `low_rank needs a floating-point parameter of rank >= 1, not ${u.dtype}[${u.shape.join(", ")}]`);
      return null;
    }
    // datasets
    const req = requiredDatasets(u);
    let ok = true;
    const got = {};
    for (const [dn, spec] of Object.entries(req)) {
      const c = members.get(dn);
      members.delete(dn);
      if (c && (c.refused || !(c.kind === "group" || c.kind === "dataset"))) {
        ok = false; // present, refused under §8 (reported once): not missing, not compared (SPEC §12.1)
        continue;
      }
      if (!c || c.kind !== "dataset") {
        this.add("MD405", join(p, dn), `the ${u.type} update needs a dataset '${dn}'${c ? `, not a ${c.kind}` : ""}`);
        ok = false;
        continue;
      }
      this.unknownAttributes(c);
      const info = this.dsInfo.get(c.path);
      if (!info || !info.ok) {
        ok = false;
        continue;
      }
      const m = info.meta;
      const storage = { cls: m.type === 1 ? "float" : "int", size: m.size, signed: !!m.signed };
      if (!(m.type === 0 || m.type === 1) || !sameStorage(storage, spec.storage)) {
        this.add("MD406", c.path, `storage datatype is ${m.type === 0 || m.type === 1 ? storageName(storage) : `class ${m.type}`}; ${u.dtype} ${dn} needs ${storageName(spec.storage)}`);
        ok = false;
      }
      got[dn] = m.shape.map((d) => BigInt(d));
      if (!info.ok) ok = false;
    }
    report();
    const eq = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
    const fmt = (s) => `[${s.join(", ")}]`;
    if (ok || Object.keys(got).length) {
      const shape = u.shape.map((d) => BigInt(d));
      const numel = numelOf(shape);
      const bad = (dn, why) => {
        this.add("MD407", join(p, dn), why);
        ok = false;
      };
      if (u.type === "dense" && got.xor && !eq(got.xor, shape)) bad("xor", `shape ${fmt(got.xor)}; the update's shape is ${fmt(shape)}`);
      if (u.type === "dense" && got.sub && !eq(got.sub, shape)) bad("sub", `shape ${fmt(got.sub)}; the update's shape is ${fmt(shape)}`);
      if (u.type === "replace" && got.value && !eq(got.value, shape)) bad("value", `shape ${fmt(got.value)}; the update's shape is ${fmt(shape)}`);
      const [pn, vn] = u.version === 2 ? ["gaps", "sub"] : ["indices", "xor"];
      if (u.type === "sparse" && got[pn] && got[vn]) {
        if (got[pn].length !== 1) bad(pn, `rank ${got[pn].length}; ${pn} must be [k]`);
        else if (got[vn].length !== 1) bad(vn, `rank ${got[vn].length}; ${vn} must be [k]`);
        else if (got[pn][0] !== got[vn][0]) bad(vn, `length ${got[vn][0]} differs from the ${got[pn][0]} ${pn}`);
        else if (got[pn][0] > numel) bad(pn, `${got[pn][0]} ${pn} for ${numel} elements`);
      }
      if (u.type === "low_rank" && got.A && got.B) {
        const mm = shape[0];
        const nn = numelOf(shape.slice(1));
        const A = got.A;
        const B = got.B;
        if (A.length !== 2) bad("A", `rank ${A.length}; A must be [m, r]`);
        else if (B.length !== 2) bad("B", `rank ${B.length}; B must be [r, n]`);
        else {
          const r = A[1];
          const mn = mm < nn ? mm : nn;
          const rmax = mn > 1n ? mn : 1n;
          if (A[0] !== mm) bad("A", `shape ${fmt(A)}; A must be [${mm}, r]`);
          else if (B[1] !== nn) bad("B", `shape ${fmt(B)}; B must be [r, ${nn}]`);
          else if (B[0] !== r) bad("B", `shape ${fmt(B)}; B must be [${r}, ${nn}] to match A`);
          else if (r < 1n || r > rmax) bad("A", `rank r = ${r}; it must satisfy 1 <= r <= ${rmax}`);
        }
      }
    }
    return { update: u, ok };
  }

  // MD303 for each attribute of `obj` that this document does not define (those in `known`); a refused
  // attribute (read as undefined) was reported once, under §8.
  unknownAttributes(obj, known = []) {
    for (const [name, value] of obj.attrs) {
      if (value !== undefined && !known.includes(name)) this.add("MD303", obj.path, `unknown attribute '${name}'`);
    }
  }

  // §7.8: a parameter whose update is of a type the file defines: the definition's `inputs` as
  // datasets of any storage datatype of §8.2 (MD405), a function for its dtype (MD427), and checks
  // 7-8 of §7.8 with this parameter's shapes (MD427, MD428).
  checkEmbeddedUpdate(g, u, emb, members) {
    const p = g.path;
    if (u.shape.length > this.limits.maxRank || this.findings.some((f) => f.path === p && (f.code === "MD507" || f.code === "MD508"))) return null;
    let ok = true;
    const fn = emb.functions.get(u.dtype);
    if (!fn) {
      this.add("MD427", p, `type ${describe(u.type)} has no function for dtype ${u.dtype} (it has ${[...emb.functions.keys()].sort().join(", ")})`);
      ok = false;
    }
    const datasets = new Map();
    let complete = true;
    for (const dn of emb.definition.inputs) {
      const c = members.get(dn);
      members.delete(dn);
      if (!c || c.kind !== "dataset" || c.refused) {
        if (!c || (c.kind === "group" && !c.refused)) this.add("MD405", join(p, dn), `the ${u.type} update needs a dataset '${dn}'${c ? ", not a group" : ""}`);
        ok = false; // a refused member was reported once, under §8 (SPEC §12.1): not missing, nor unknown
        complete = false;
        continue;
      }
      const info = this.dsInfo.get(c.path);
      if (!info || !info.ok || !info.meta || !info.meta.shape) {
        ok = false; // refused under §8.2 / §8.3, which said why: check 8 has no shape to work with
        complete = false;
        continue;
      }
      for (const [an, v] of c.attrs) if (v !== undefined) this.add("MD303", c.path, `unknown attribute '${an}'`);
      const m = info.meta;
      datasets.set(dn, { shape: m.shape.map((d) => BigInt(d)), storage: { cls: m.type === 1 ? "float" : "int", size: m.size, signed: !!m.signed } });
    }
    for (const c of members.values()) {
      if ((c.kind === "group" || c.kind === "dataset") && !c.refused) {
        this.add("MD303", c.path, "unknown member");
        if (c.kind === "dataset") this.unknownAttributes(c);
      }
    }
    if (fn && complete) {
      const problems = checkShapes(fn.model, u.shape.map((d) => BigInt(d)), Object.fromEntries(datasets), this.limits);
      for (const [code, message] of problems) this.add(code, p, message);
      if (problems.length) ok = false;
    }
    return { update: u, ok };
  }

  // A dataset's bytes; kept for apply unless `cache` is false (files and the layout, which apply
  // does not write to a .safetensors output, are read once).
  data(path, cache = true) {
    if (this.dataCache.has(path)) return this.dataCache.get(path);
    const info = this.dsInfo.get(path);
    if (info.chunked) this.checkInflation(path, info.chunked);
    const b = this.h5.datasetBytes(path, info.meta);
    if (cache) this.dataCache.set(path, b);
    return b;
  }

  // §8.3: every chunk decodes to exactly its size, and no deflate step may make more than its input
  // had when written. h5wasm's libhdf5 inflates a chunk until its stream ends — a stream of a few
  // megabytes can ask for gigabytes — so each chunk (filtered or not) is first decoded here, bounded, and
  // a chunk that breaks the rule is MD513 (a RangeError, as the callers report it).
  checkInflation(path, { chunks, filters, chunkBytes }) {
    const bounds = []; // [bytes, exact] entering each filter when written
    let size = chunkBytes;
    let exact = true;
    for (const f of filters) {
      bounds.push([size, exact]);
      if (f.id === 3) size += 4;
      else if (f.id === 1) {
        size += Math.floor(size / 1000) + 1024;
        exact = false;
      }
    }
    for (const chunk of chunks) {
      const where = `chunk at byte ${chunk.addr}`;
      let buf = this.raw.read(chunk.addr, chunk.size, path);
      for (let i = filters.length - 1; i >= 0; i--) {
        const [expected, isExact] = bounds[i];
        const f = filters[i];
        if (f.id === 1) {
          try {
            buf = zlib.inflateSync(buf, { maxOutputLength: expected });
          } catch (e) {
            if (e.code === "ERR_BUFFER_TOO_LARGE") throw new RangeError(`${where} inflates to more than ${expected} bytes`);
            throw new RangeError(`${where} does not inflate: ${e.message}`);
          }
        } else if (f.id === 2) {
          const item = f.cd_values && f.cd_values.length === 1 ? f.cd_values[0] : 0;
          if (item < 1) throw new RangeError(`${where}: the shuffle filter's parameters are invalid`);
          buf = unshuffle(buf, item);
        } else if (f.id === 3) {
          if (buf.length < 4) throw new RangeError(`${where} is too short to hold its fletcher32 checksum`);
          buf = buf.subarray(0, buf.length - 4); // the checksum itself is h5wasm's to check
        }
        if (isExact && buf.length !== expected) throw new RangeError(`${where} decodes to ${buf.length} bytes, not ${expected}`);
      }
      if (buf.length !== chunkBytes) throw new RangeError(`${where} holds ${buf.length} bytes, not ${chunkBytes}`);
    }
  }

  // Data rules: MD408, MD409, MD410, and MD307 (§5.6: the layout is data).
  checkData() {
    const others = new Set([...this.files, ...(this.layout ? [this.layout] : [])]);
    for (const prm of [...this.params, ...others]) {
      if (!prm.ok) continue;
      const cache = !others.has(prm);
      const u = prm.update;
      const p = prm.path;
      const before = this.findings.length;
      try {
        const bool = u.dtype === "bool";
        const checkBool = (dn) => {
          const b = this.data(join(p, dn));
          for (let i = 0; i < b.length; i++) {
            if (b[i] > 1) {
              this.add("MD409", join(p, dn), `dataset '${dn}' holds a bool value other than 0 or 1 (${b[i]} at ${i})`);
              prm.ok = false;
              return;
            }
          }
        };
        if (u.type === "dense") {
          if (bool) checkBool("xor");
          else this.data(join(p, u.version === 2 ? "sub" : "xor")); // every stored byte decodes (MD513)
        }
        if (u.type === "sparse" && u.version === 2) {
          const { error } = positionsFromGaps(this.data(join(p, "gaps")), numelOf(u.shape));
          if (error) {
            this.add("MD408", join(p, "gaps"), `the gaps make position ${error.position} at ${error.j}, not less than numel = ${numelOf(u.shape)}`);
            prm.ok = false;
          }
          // every stored byte of `sub` decodes too (MD513 instead of the group's other data findings, SPEC §12.1)
          if (bool) checkBool("sub");
          else this.data(join(p, "sub"));
        } else if (u.type === "sparse") {
          const b = this.data(join(p, "indices"));
          const idx = new BigUint64Array(b.buffer, b.byteOffset, b.length / 8);
          const numel = numelOf(u.shape);
          for (let j = 0; j < idx.length; j++) {
            if (idx[j] >= numel) {
              this.add("MD408", join(p, "indices"), `index ${idx[j]} at ${j} is not less than numel = ${numel}`);
              prm.ok = false;
              break;
            }
            if (j > 0 && idx[j] <= idx[j - 1]) {
              this.add("MD408", join(p, "indices"), `indices are not strictly increasing at ${j} (${idx[j - 1]}, ${idx[j]})`);
              prm.ok = false;
              break;
            }
          }
          if (bool) checkBool("xor");
          else this.data(join(p, "xor"));
        }
        if (u.type === "replace") {
          if (bool) checkBool("value");
          const value = this.data(join(p, "value"), cache);
          const h = sha256hex(value);
          if (h !== u.sha256) {
            this.add("MD410", join(p, "value"), `the stored value does not match \`sha256\` (it hashes to ${h})`);
            prm.ok = false;
          } else if (prm === this.layout) {
            const { errs, doc } = layoutProblems(value);
            if (errs.length) {
              this.add("MD307", join(p, "value"), `the weights layout is malformed: ${errs.slice(0, 5).join("; ")}${errs.length > 5 ? `; and ${errs.length - 5} more` : ""}`);
              prm.ok = false;
            } else prm.doc = doc;
          }
        }
        if (u.type === "low_rank") {
          for (const [dn, key] of [["A", "A_sha256"], ["B", "B_sha256"]]) {
            const h = sha256hex(this.data(join(p, dn)));
            if (h !== u[key]) {
              this.add("MD410", join(p, dn), `factor ${dn} does not match \`${key}\` (it hashes to ${h})`);
              prm.ok = false;
            }
          }
        }
      } catch (e) {
        if (e instanceof H5Error || e instanceof RangeError) {
          this.findings.length = before; // SPEC §12.1: data that does not decode is the group's one data finding
          this.add("MD513", p, `the data cannot be read: ${e.message}`);
          prm.ok = false;
        } else throw e;
      }
    }
  }

  result() {
    return { file: this.path, valid: this.errors.length === 0, findings: this.findings };
  }
}

// libhdf5's shuffle undone: whole elements of `item` bytes, trailing bytes as they are.
function unshuffle(buf, item) {
  const n = Math.floor(buf.length / item);
  if (item <= 1 || n <= 1) return buf;
  const out = Buffer.alloc(buf.length);
  for (let b = 0; b < item; b++) for (let e = 0; e < n; e++) out[e * item + b] = buf[b * n + e];
  buf.copy(out, n * item, n * item);
  return out;
}

export async function validateFile(path, opts = {}) {
  const v = new Validation(path, opts.limits || DEFAULT_LIMITS);
  try {
    await v.run(opts);
  } catch (e) {
    if (e instanceof MdiffError) v.add(e.code, e.path || "/", e.message);
    else if (e instanceof H5Error || e instanceof RawError) v.add("MD513", "/", `the file cannot be read: ${e.message}`);
    else v.add("MD513", "/", `the file cannot be read (${e && e.name}: ${e && e.message})`);
  }
  return v;
}
