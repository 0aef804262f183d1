// The page's side of its Web Worker (worker.js): one worker, started on first use from the worker's bundle
// (build.mjs puts its text here as the module "mdiff-view-worker"), jobs answered in order.
import WORKER_SOURCE from "mdiff-view-worker";

let worker = null;
let nextJob = 0;
const jobs = new Map(); // job -> {onListing, resolve, reject}

function failAll(error) {
  for (const j of jobs.values()) j.reject(error);
  jobs.clear();
  worker = null;
}

function started() {
  if (worker) return worker;
  const url = URL.createObjectURL(new Blob([WORKER_SOURCE], { type: "text/javascript" }));
  worker = new Worker(url);
  URL.revokeObjectURL(url);
  worker.onmessage = (ev) => {
    const { job, kind } = ev.data;
    const j = jobs.get(job);
    if (!j) return;
    if (kind === "listing") {
      if (j.onListing) j.onListing(ev.data.params);
      return;
    }
    jobs.delete(job);
    if (kind === "done") j.resolve(ev.data.summary);
    else j.reject(Object.assign(new Error(ev.data.error.message), { code: ev.data.error.code }));
  };
  worker.onerror = (ev) => {
    ev.preventDefault();
    failAll(new Error(`the page's reader stopped: ${ev.message || "an error in its worker"}`));
  };
  return worker;
}

// The summary (model.js) of a file's bytes, read and validated in the worker; `onListing(params)` is called
// first, with the parameters listed before validation (null when none could be). `format` (1 or 2): the
// summary's `id` is the bytes' commit id in a repository of that format (§4.3).
export function inspect(bytes, { format = null, onListing = null } = {}) {
  const w = started();
  const job = ++nextJob;
  return new Promise((resolve, reject) => {
    jobs.set(job, { onListing, resolve, reject });
    const copy = bytes.slice().buffer; // transferred: the page keeps none of it
    w.postMessage({ job, bytes: copy, format }, [copy]);
  });
}
