// A quick listing of a .mdiff file's parameters, for the table before validation ends: each link of
// /parameters (its name decoded, §5.2) and its `update` attribute's type, dtype, shape and recorded relative
// change (§7.1), read with h5wasm as src/hdf5.js opens files. Nothing here is trusted: a parameter whose
// attribute does not parse is listed with what is known ("?"), and a file that does not open lists nothing;
// the validation that follows (src/validate.js) says what is wrong, and its summary replaces this one.
import { H5File } from "../src/hdf5.js";
import { decodeName } from "../src/names.js";
import { parseStrict } from "../src/json.js";

const text = new TextDecoder("utf-8");
const MAX_ATTRIBUTE_BYTES = 1 << 20; // a longer update attribute is the validator's to report (§12)

function updateOf(file, path) {
  const meta = file.attrMeta(path, "update");
  if (!meta || meta.vlen || !(meta.size * meta.total_size <= MAX_ATTRIBUTE_BYTES)) return null;
  const u = parseStrict(text.decode(file.attrBytes(path, "update", meta)).replace(/\0+$/, ""));
  return u && typeof u === "object" && !Array.isArray(u) ? u : null;
}

export function listParameters(path, limit = 1_000_000) {
  let file;
  try {
    file = new H5File(path);
  } catch {
    return null;
  }
  try {
    const links = file.keys("/parameters") || [];
    return links.slice(0, limit).map((link) => {
      let name = link;
      try {
        name = decodeName(link);
      } catch {
        /* the validator reports it (MD302) */
      }
      let u = null;
      try {
        u = updateOf(file, `/parameters/${link}`);
      } catch {
        /* unreadable: the validator reports it */
      }
      const stats = (u && u.stats && typeof u.stats === "object" && u.stats) || {};
      return {
        name,
        type: u && typeof u.type === "string" ? u.type : null,
        dtype: u && typeof u.dtype === "string" ? u.dtype : null,
        shape: u && Array.isArray(u.shape) && u.shape.every((x) => typeof x === "number" || typeof x === "bigint") ? u.shape.map(Number) : null,
        stored: null, // from the validation's chunk index (model.js)
        relChange: typeof stats.rel_change === "number" ? stats.rel_change : null,
        changed: null,
        ok: null,
      };
    });
  } catch {
    return null;
  } finally {
    file.close();
  }
}
