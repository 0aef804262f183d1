// SPEC.md §5.5: the paths of files (and of the weights layout, §5.6) — untrusted input that a writer
// of model folders turns into file names (§10.2). Each rule returns a reason, or null when it holds.

const MAX_PATH_BYTES = 4096;
const MAX_COMPONENTS = 64;
const MAX_COMPONENT_BYTES = 255;
// §5.5 rule 3 (with the final space or dot below): backslash, colon, * ? " < > | and the control characters U+0000-U+001F, U+007F.
const FORBIDDEN = /[\\:*?"<>|\u0000-\u001f\u007f]/;
// §5.5 rule 4: device names, compared with ASCII letters in lower case.
const DEVICES = new Set(["con", "prn", "aux", "nul"]);
for (const d of "0123456789\u00b9\u00b2\u00b3") DEVICES.add(`com${d}`).add(`lpt${d}`);

// Only the ASCII letters A-Z are lowered (§5.5: "with ASCII letters in lower case").
export function asciiLower(s) {
  return s.replace(/[A-Z]+/g, (m) => m.toLowerCase());
}

const show = (s) => JSON.stringify(s.length > 80 ? `${s.slice(0, 80)}...` : s);

// Rules 1-4 of §5.5 for one path (a string of Unicode scalar values).
export function pathProblem(path) {
  if (typeof path !== "string") return "it is not a string";
  const bytes = Buffer.byteLength(path, "utf8");
  if (bytes < 1 || bytes > MAX_PATH_BYTES) return `it is ${bytes} bytes long in UTF-8, not 1 to ${MAX_PATH_BYTES}`;
  const parts = path.split("/");
  if (parts.length > MAX_COMPONENTS) return `it has ${parts.length} components, more than ${MAX_COMPONENTS}`;
  for (const c of parts) {
    const n = Buffer.byteLength(c, "utf8");
    if (n === 0) return "it has an empty component (a leading, trailing or doubled '/': paths are relative)";
    if (n > MAX_COMPONENT_BYTES) return `the component ${show(c)} is ${n} bytes long, more than ${MAX_COMPONENT_BYTES}`;
    if (c.startsWith(".")) return `the component ${show(c)} starts with '.' (., .. and hidden entries are not allowed)`;
    const bad = FORBIDDEN.exec(c);
    if (bad) {
      const cp = bad[0].codePointAt(0);
      const what = cp < 0x20 || cp === 0x7f ? `the control character U+${cp.toString(16).toUpperCase().padStart(4, "0")}` : `'${bad[0]}'`;
      return `the component ${show(c)} contains ${what}`;
    }
    if (c.endsWith(" ") || c.endsWith(".")) return `the component ${show(c)} ends with a space or a '.'`;
    const stem = asciiLower(c.split(".", 1)[0]);
    if (DEVICES.has(stem)) return `the component ${show(c)} is the device name ${stem}`;
  }
  return null;
}

// The collisions among a set of paths (§5.5): two paths equal with ASCII letters in lower case, or a
// path that is another followed by '/' and more (compared in lower case too: on a case-insensitive
// file system `A` and `a/b` are also a file and a folder of one name). Returns [{path, why}].
export function pathCollisions(paths) {
  const out = [];
  const lowered = new Map(); // lower-cased path -> the first path that has it
  for (const p of paths) {
    const l = asciiLower(p);
    if (lowered.has(l)) out.push({ path: p, why: `it equals ${show(lowered.get(l))} with ASCII letters in lower case` });
    else lowered.set(l, p);
  }
  for (const p of paths) {
    const l = asciiLower(p);
    for (let k = l.indexOf("/"); k >= 0; k = l.indexOf("/", k + 1)) {
      const folder = l.slice(0, k);
      if (lowered.has(folder)) {
        out.push({ path: p, why: `it is below ${show(lowered.get(folder))}, which is a file: a path cannot be both a file and a folder` });
        break;
      }
    }
  }
  return out;
}
