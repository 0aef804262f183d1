// A .mdiff file's bytes read in the browser with mdiff-js's validator (src/validate.js, unchanged): the
// bytes go into h5wasm's in-memory filesystem and the raw reader's (shims/fs.js) under one name, the file
// is validated, and what the page shows is taken from the validation (model.js).
import "./shims/globals.js";
import { register, unregister } from "./shims/fs.js";
import { commitIdOf } from "../src/block_ids.js";
import h5wasm from "./shims/h5wasm.js";
import { summarize } from "./model.js";

let counter = 0;

// §4.3: the id of a commit file's bytes in a repository of `format` (1: their SHA-256; 2: the block list's)
export function commitId(bytes, format) {
  return commitIdOf(bytes, format);
}

export async function inspectBytes(bytes) {
  const { validateFile } = await import("../src/validate.js");
  const Module = await h5wasm.ready;
  const path = `/mdiff-view-${++counter}.mdiff`;
  Module.FS.writeFile(path, bytes);
  register(path, bytes);
  let v = null;
  try {
    v = await validateFile(path);
    return summarize(v, bytes.length);
  } finally {
    if (v) v.close();
    unregister(path);
    try {
      Module.FS.unlink(path);
    } catch {
      /* already gone */
    }
  }
}
