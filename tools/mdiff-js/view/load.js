// A .mdiff file's bytes read with mdiff-js, in the page's Web Worker (worker.js): the bytes go into h5wasm's
// in-memory filesystem and the raw reader's (shims/fs.js) under one name; the parameters are listed first
// (listing.js, for the table), then the file is validated with src/validate.js, unchanged, and what the page
// shows is taken from the validation (model.js); with a repository's format, the bytes' commit id too
// (src/block_ids.js, §4.3, the code src/repository.js checks ids with).
import "./shims/globals.js";
import { register, unregister } from "./shims/fs.js";
import { init } from "../src/hdf5.js";
import { validateFile } from "../src/validate.js";
import { commitIdOf } from "../src/block_ids.js";
import { listParameters } from "./listing.js";
import { summarize } from "./model.js";

let counter = 0;

// The summary of `bytes` (model.js); `onListing(params)` first, with the listed parameters (null: none could be).
export async function inspectBytes(bytes, { format = null, onListing = null } = {}) {
  const Module = await init();
  const path = `/mdiff-view-${++counter}.mdiff`;
  Module.FS.writeFile(path, bytes);
  register(path, bytes);
  let v = null;
  try {
    if (onListing) onListing(listParameters(path));
    v = await validateFile(path);
    const summary = summarize(v, bytes.length);
    if (format === 1 || format === 2) summary.id = commitIdOf(bytes, format);
    return summary;
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
