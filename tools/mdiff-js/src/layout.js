// SPEC.md §5.6: the weights layout, the value of `/layout` — a JSON text (UTF-8, parsed as §4.1
// parses) of an object that matches schemas/layout.schema.json, and the rules besides the schema.
// A data rule (MD307): checked once the value's bytes are read and match their sha256.

import { parseStrict, isPlainObject, describe } from "./json.js";
import { pathProblem, asciiLower } from "./paths.js";

// format → the suffixes of its files' paths and of its index's path (`torch`: revision 11)
const SUFFIXES = {
  safetensors: { file: ".safetensors", index: ".safetensors.index.json" },
  torch: { file: ".bin", index: ".bin.index.json" },
};

function closed(errs, where, obj, required, optional) {
  for (const k of required) if (!(k in obj)) errs.push(`${where}: '${k}' is a required member`);
  for (const k of Object.keys(obj)) {
    if (!required.includes(k) && !optional.includes(k)) errs.push(`${where}: member '${k}' is not allowed`);
  }
}

// schemas/layout.schema.json, by hand. Returns a list of "where: what".
export function checkLayoutSchema(doc) {
  const errs = [];
  if (!isPlainObject(doc)) return [`(root): ${Array.isArray(doc) ? "an array" : describe(doc)} is not an object`];
  closed(errs, "(root)", doc, ["format", "files"], ["index"]);
  if ("format" in doc && !Object.hasOwn(SUFFIXES, doc.format)) {
    errs.push(`format: ${describe(doc.format)} is not "safetensors" or "torch"`);
  }
  if ("files" in doc) {
    if (!Array.isArray(doc.files)) errs.push("files: is not an array");
    else {
      doc.files.forEach((f, i) => {
        const w = `files/${i}`;
        if (!isPlainObject(f)) {
          errs.push(`${w}: is not an object`);
          return;
        }
        closed(errs, w, f, ["path", "tensors"], ["metadata"]);
        if ("path" in f && typeof f.path !== "string") errs.push(`${w}/path: is not a string`);
        if ("tensors" in f) {
          if (!Array.isArray(f.tensors)) errs.push(`${w}/tensors: is not an array`);
          else {
            f.tensors.forEach((t, j) => {
              if (typeof t !== "string") errs.push(`${w}/tensors/${j}: ${describe(t)} is not a string`);
              else if (t.length === 0) errs.push(`${w}/tensors/${j}: must not be empty`);
            });
          }
        }
        if ("metadata" in f) {
          if (!isPlainObject(f.metadata)) errs.push(`${w}/metadata: is not an object`);
          else for (const [k, v] of Object.entries(f.metadata)) if (typeof v !== "string") errs.push(`${w}/metadata/${k}: is not a string`);
        }
      });
    }
  }
  if ("index" in doc) {
    const x = doc.index;
    if (!isPlainObject(x)) errs.push("index: is not an object");
    else {
      closed(errs, "index", x, ["path", "metadata"], []);
      if ("path" in x && typeof x.path !== "string") errs.push("index/path: is not a string");
      if ("metadata" in x && !isPlainObject(x.metadata)) errs.push("index/metadata: is not an object");
    }
  }
  return errs;
}

// The rules of §5.6 besides the schema, for a document that matches it.
function checkLayoutRules(doc) {
  const errs = [];
  const want = SUFFIXES[doc.format];
  const paths = doc.files.map((f, i) => ({ where: `files/${i}/path`, path: f.path, suffix: want.file }));
  if (doc.index) paths.push({ where: "index/path", path: doc.index.path, suffix: want.index });
  if (doc.format === "torch") {
    doc.files.forEach((f, i) => {
      if ("metadata" in f) errs.push(`files/${i}/metadata: a torch file holds no metadata`);
    });
  }
  const lowered = new Map();
  for (const { where, path, suffix } of paths) {
    const why = pathProblem(path);
    if (why) errs.push(`${where}: ${describe(path)} is not a safe path (§5.5): ${why}`);
    else if (!path.endsWith(suffix)) errs.push(`${where}: ${describe(path)} does not end in ${suffix}`);
    const l = asciiLower(path);
    if (lowered.has(l)) errs.push(`${where}: ${describe(path)} equals ${lowered.get(l)} with ASCII letters in lower case`);
    else lowered.set(l, where);
  }
  // §5.5's rules for paths include "no path is a folder of another"
  for (const { where, path } of paths) {
    const l = asciiLower(path);
    for (let k = l.indexOf("/"); k >= 0; k = l.indexOf("/", k + 1)) {
      if (lowered.has(l.slice(0, k))) {
        errs.push(`${where}: ${describe(path)} is below the path of ${lowered.get(l.slice(0, k))}`);
        break;
      }
    }
  }
  const seen = new Map();
  doc.files.forEach((f, i) => {
    for (const t of f.tensors) {
      if (seen.has(t)) errs.push(`files/${i}/tensors: the tensor ${describe(t)} is also in files/${seen.get(t)}`);
      else seen.set(t, i);
    }
  });
  return errs;
}

// A layout value (bytes): {errs: [why, ...]} when it is malformed, else {errs: [], doc}.
export function layoutProblems(bytes) {
  let text;
  try {
    text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(bytes);
  } catch {
    return { errs: ["the value is not valid UTF-8"] };
  }
  let doc;
  try {
    doc = parseStrict(text);
  } catch (e) {
    return { errs: [`the value is not valid JSON: ${e.message}`] };
  }
  const errs = checkLayoutSchema(doc);
  if (errs.length) return { errs };
  const more = checkLayoutRules(doc);
  return more.length ? { errs: more } : { errs: [], doc };
}
