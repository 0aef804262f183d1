// SPEC.md §5.2: parameter names <-> link names.

function needsEscape(cp, first) {
  return cp === 0x25 || cp === 0x2f || cp <= 0x1f || cp === 0x7f || (first && cp === 0x2e);
}

export function encodeName(name) {
  let out = "";
  let first = true;
  for (const ch of name) {
    const cp = ch.codePointAt(0);
    out += needsEscape(cp, first) ? "%" + cp.toString(16).toUpperCase().padStart(2, "0") : ch;
    first = false;
  }
  return out;
}

// Returns the parameter name, or throws an Error saying why the link name is not canonical.
export function decodeName(link) {
  if (link.length === 0) throw new Error("an empty link name");
  let out = "";
  let i = 0;
  let first = true;
  while (i < link.length) {
    const cp = link.codePointAt(i);
    const width = cp > 0xffff ? 2 : 1;
    if (cp >= 0xd800 && cp <= 0xdfff) throw new Error("a link name that is not valid Unicode");
    if (cp === 0x25) {
      const hex = link.slice(i + 1, i + 3);
      if (!/^[0-9A-Fa-f]{2}$/.test(hex)) throw new Error("a '%' not followed by two hexadecimal digits");
      if (!/^[0-9A-F]{2}$/.test(hex)) throw new Error(`the escape %${hex} uses lower-case hexadecimal digits`);
      const v = parseInt(hex, 16);
      if (!needsEscape(v, first)) throw new Error(`the escape %${hex} stands for a character that needs none`);
      out += String.fromCharCode(v);
      i += 3;
    } else {
      if (needsEscape(cp, first)) {
        throw new Error(`the character U+${cp.toString(16).toUpperCase().padStart(4, "0")} must be escaped`);
      }
      out += String.fromCodePoint(cp);
      i += width;
    }
    first = false;
  }
  if (encodeName(out) !== link) throw new Error("the link name is not the canonical encoding of its name");
  return out;
}

// Ascending order of the UTF-8 bytes of names (§5.3).
export function compareUtf8(a, b) {
  return Buffer.compare(Buffer.from(a, "utf8"), Buffer.from(b, "utf8"));
}
