// The page's Web Worker: reads and validates the files the page sends (load.js), so that the page stays
// responsive while a large file is validated. Messages in: {job, bytes (an ArrayBuffer), format}; out:
// {job, kind: "listing", params}, then {job, kind: "done", summary} or {job, kind: "error", error}.
// build.mjs bundles it into the page's script (a classic script, as a Blob: a page opened from file:// may
// not start a worker from a file).
import "./shims/globals.js";
import { inspectBytes } from "./load.js";

let queue = Promise.resolve();

self.onmessage = (ev) => {
  const { job, bytes, format } = ev.data;
  queue = queue.then(async () => {
    try {
      const summary = await inspectBytes(new Uint8Array(bytes), { format, onListing: (params) => self.postMessage({ job, kind: "listing", params }) });
      self.postMessage({ job, kind: "done", summary });
    } catch (e) {
      self.postMessage({ job, kind: "error", error: { code: e && typeof e.code === "string" ? e.code : null, message: String((e && e.message) || e) } });
    }
  });
};
