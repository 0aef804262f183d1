// Thin layer over h5wasm (which runs HDF5 2.0 compiled to WebAssembly): open a file from the
// real filesystem, walk its links, read attribute bytes and dataset bytes without any decoding.

import h5wasm from "h5wasm/node";

let Module = null;

export async function init() {
  if (!Module) {
    Module = await h5wasm.ready;
    // Turn HDF5 errors into JS exceptions instead of printing the HDF5 error stack.
    if (typeof Module.activate_throwing_error_handler === "function") Module.activate_throwing_error_handler();
  }
  return Module;
}

export class H5Error extends Error {}

// Shortens an HDF5 error stack to its first and last lines.
export function h5message(e) {
  const s = String((e && e.message) || e);
  const lines = s.split("\n").map((l) => l.trim()).filter(Boolean);
  const minors = lines.filter((l) => l.startsWith("minor:")).map((l) => l.slice(6).trim());
  const fns = lines.filter((l) => /^#\d+:/.test(l)).map((l) => l.replace(/^#\d+:.* in /, ""));
  if (fns.length) return `${fns[0]}${minors.length ? ` (${minors[minors.length - 1]})` : ""}`;
  return lines[0] || "HDF5 error";
}

function wrap(fn) {
  try {
    return fn();
  } catch (e) {
    throw new H5Error(h5message(e));
  }
}

export class H5File {
  constructor(path) {
    this.path = path;
    this.file = wrap(() => new h5wasm.File(path, "r"));
    this.id = this.file.file_id;
  }

  close() {
    try {
      this.file.close();
    } catch {
      /* ignore */
    }
  }

  // Link names of a group, as h5wasm decodes them (UTF-8).
  keys(path) {
    return wrap(() => Module.get_names(this.id, path, false));
  }

  // "hard" | "soft" | "external" | "user"
  linkKind(path) {
    // the link itself first (it throws when no link has this name): a dangling soft link names no object
    const soft = wrap(() => Module.get_symbolic_link(this.id, path));
    if (soft !== null && soft !== undefined) return "soft";
    const t = wrap(() => Module.get_type(this.id, path));
    if (t === Module.H5G_UDLINK) {
      let ext;
      try {
        ext = wrap(() => Module.get_external_link(this.id, path));
      } catch {
        // a link of class 64 or more whose value does not unpack: still no hard link (SPEC §8.1, MD500)
        return "external or user-defined";
      }
      return ext && ext.filename !== undefined ? "external" : "user";
    }
    if (t === Module.H5G_LINK) return "soft";
    const target = wrap(() => Module.get_symbolic_link(this.id, path));
    if (target !== null && target !== undefined) return "soft";
    return "hard";
  }

  // "group" | "dataset" | "datatype" | "other"
  objectKind(path) {
    const t = wrap(() => Module.get_type(this.id, path));
    if (t === Module.H5G_GROUP) return "group";
    if (t === Module.H5G_DATASET) return "dataset";
    if (t === Module.H5G_TYPE) return "datatype";
    return "other";
  }

  // The object header address of the object at `path` (a hard link), as a Number.
  address(path) {
    const ref = wrap(() => Module.create_object_reference(this.id, path));
    let v = 0n;
    for (let i = ref.length - 1; i >= 0; i--) v = (v << 8n) | BigInt(ref[i]);
    return v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : Infinity;
  }

  attrNames(path) {
    return wrap(() => Module.get_attribute_names(this.id, path));
  }

  attrMeta(path, name) {
    return wrap(() => Module.get_attribute_metadata(this.id, path, name));
  }

  // The raw bytes of a fixed-size attribute (caller has checked its size).
  attrBytes(path, name, meta) {
    const nbytes = meta.size * meta.total_size;
    const ptr = Module._malloc(Math.max(nbytes, 1));
    if (!ptr) throw new H5Error("out of memory");
    try {
      wrap(() => Module.get_attribute_data(this.id, path, name, BigInt(ptr)));
      return Buffer.from(Module.HEAPU8.slice(ptr, ptr + nbytes));
    } finally {
      Module._free(ptr);
    }
  }

  datasetMeta(path) {
    return wrap(() => Module.get_dataset_metadata(this.id, path));
  }

  // Opens a committed datatype (decoding its datatype message, as libhdf5 does when it opens the object).
  datatypeMeta(path) {
    return wrap(() => Module.get_datatype_metadata(this.id, path));
  }

  datasetFilters(path) {
    return wrap(() => Module.get_dataset_filters(this.id, path));
  }

  // All the bytes of a dataset, in its in-memory (native, little-endian) form. Large datasets
  // are read in slabs along the first dimension so the WebAssembly heap never holds more than
  // about 64 MiB of them at once.
  datasetBytes(path, meta) {
    const shape = meta.shape || [];
    const elem = meta.size;
    const total = shape.reduce((a, b) => a * b, 1) * elem;
    const out = Buffer.alloc(total);
    if (total === 0) return out;
    const SLAB = 64 * 1024 * 1024;
    const readInto = (count, offset, dst) => {
      const n = count ? count.reduce((a, b) => a * b, 1) * elem : total;
      const ptr = Module._malloc(n);
      if (!ptr) throw new H5Error("out of memory");
      try {
        wrap(() =>
          Module.get_dataset_data(
            this.id,
            path,
            count ? count.map(BigInt) : null,
            offset ? offset.map(BigInt) : null,
            count ? count.map(() => 1n) : null,
            BigInt(ptr),
          ),
        );
        out.set(Module.HEAPU8.subarray(ptr, ptr + n), dst);
      } finally {
        Module._free(ptr);
      }
    };
    if (total <= SLAB || shape.length === 0) {
      readInto(null, null, 0);
      return out;
    }
    const rowBytes = (total / shape[0]);
    const rows = Math.max(1, Math.floor(SLAB / rowBytes));
    for (let r = 0; r < shape[0]; r += rows) {
      const n = Math.min(rows, shape[0] - r);
      readInto([n, ...shape.slice(1)], [r, ...shape.slice(1).map(() => 0)], r * rowBytes);
    }
    return out;
  }
}
