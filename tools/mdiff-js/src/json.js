// Strict JSON (RFC 8259) parser, as SPEC.md §4.1 requires for every JSON attribute:
// duplicate member names, NaN/Infinity tokens, numbers that round to infinity in binary64 and text
// after the value are errors; so are a byte-order mark before the value (U+FEFF is no whitespace) and a
// string holding a lone surrogate (`\ud800` not followed by `\udc00`-`\udfff`, or a low one alone),
// which no UTF-8 text can hold.
// Integers (no fraction, no exponent) beyond 2^53 are returned as BigInt so that
// shapes are never silently rounded; every other number is a JS number.

export class JSONError extends Error {}

const WS = new Set([0x20, 0x09, 0x0a, 0x0d]);
const MAX_NUMBER = 4096; // characters of one number token (SPEC.md §4.1)
// a high surrogate not followed by a low one, or a low one not after a high one (SPEC.md §4.1)
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

export function parseStrict(text) {
  let i = 0;
  const n = text.length;

  function fail(msg) {
    throw new JSONError(`${msg} at offset ${i}`);
  }
  function ws() {
    while (i < n && WS.has(text.charCodeAt(i))) i++;
  }
  function value(depth) {
    if (depth > 512) fail("nesting too deep");
    ws();
    if (i >= n) fail("unexpected end of text");
    const c = text[i];
    if (c === "{") return object(depth);
    if (c === "[") return array(depth);
    if (c === '"') return string();
    if (c === "t") return literal("true", true);
    if (c === "f") return literal("false", false);
    if (c === "n") return literal("null", null);
    if (c === "-" || (c >= "0" && c <= "9")) return number();
    if (text.startsWith("NaN", i) || text.startsWith("Infinity", i)) fail("NaN and Infinity are not JSON");
    if (c === "\uFEFF") fail("a byte-order mark (U+FEFF) is no JSON whitespace"); // SPEC.md §4.1, not stripped
    fail(`unexpected character ${JSON.stringify(c)}`);
  }
  function literal(word, v) {
    if (!text.startsWith(word, i)) fail("invalid literal");
    i += word.length;
    return v;
  }
  function object(depth) {
    i++; // {
    const out = Object.create(null);
    const seen = new Set();
    ws();
    if (text[i] === "}") {
      i++;
      return out;
    }
    for (;;) {
      ws();
      if (text[i] !== '"') fail("expected a member name");
      const k = string();
      if (seen.has(k)) fail(`duplicate member name ${JSON.stringify(k)}`);
      seen.add(k);
      ws();
      if (text[i] !== ":") fail("expected ':'");
      i++;
      out[k] = value(depth + 1);
      ws();
      if (text[i] === ",") {
        i++;
        continue;
      }
      if (text[i] === "}") {
        i++;
        return out;
      }
      fail("expected ',' or '}'");
    }
  }
  function array(depth) {
    i++; // [
    const out = [];
    ws();
    if (text[i] === "]") {
      i++;
      return out;
    }
    for (;;) {
      out.push(value(depth + 1));
      ws();
      if (text[i] === ",") {
        i++;
        continue;
      }
      if (text[i] === "]") {
        i++;
        return out;
      }
      fail("expected ',' or ']'");
    }
  }
  function string() {
    i++; // opening quote
    let out = "";
    let start = i;
    for (;;) {
      if (i >= n) fail("unterminated string");
      const ch = text.charCodeAt(i);
      if (ch === 0x22) {
        out += text.slice(start, i);
        if (LONE_SURROGATE.test(out)) fail("a string holds a lone surrogate, which no UTF-8 text can hold");
        i++;
        return out;
      }
      if (ch < 0x20) fail("control character in string");
      if (ch === 0x5c) {
        out += text.slice(start, i);
        i++;
        const e = text[i];
        const simple = { '"': '"', "\\": "\\", "/": "/", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t" };
        if (e in simple) {
          out += simple[e];
          i++;
        } else if (e === "u") {
          const hex = text.slice(i + 1, i + 5);
          if (!/^[0-9a-fA-F]{4}$/.test(hex)) fail("invalid \\u escape");
          out += String.fromCharCode(parseInt(hex, 16));
          i += 5;
        } else {
          fail("invalid escape");
        }
        start = i;
        continue;
      }
      i++;
    }
  }
  function number() {
    const m = /^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/.exec(text.slice(i, i + MAX_NUMBER + 1));
    if (!m || m[0] === "-") fail("invalid number");
    if (m[0].length > MAX_NUMBER) fail(`a number of more than ${MAX_NUMBER} characters`); // SPEC.md §4.1
    i += m[0].length;
    if (text.startsWith("Infinity", i)) fail("NaN and Infinity are not JSON");
    const lex = m[0];
    if (!m[2] && !m[3]) {
      const v = Number(lex);
      if (!Number.isSafeInteger(v)) return BigInt(lex);
      return v;
    }
    // SPEC.md §4.1: a number with a fraction or an exponent is read as the nearest binary64; one
    // whose magnitude rounds to infinity (1e400) is an error, like the token Infinity.
    const v = Number(lex);
    if (!Number.isFinite(v)) fail(`the number ${lex.length > 40 ? `${lex.slice(0, 40)}...` : lex} is beyond binary64`);
    return v;
  }

  const v = value(0);
  ws();
  if (i !== n) fail("text after the JSON value");
  return v;
}

export function isPlainObject(v) {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

export function isInteger(v) {
  return typeof v === "bigint" || (typeof v === "number" && Number.isInteger(v));
}

export function isNumber(v) {
  return typeof v === "bigint" || (typeof v === "number" && Number.isFinite(v));
}

export function describe(v) {
  return JSON.stringify(v, (_k, x) => (typeof x === "bigint" ? x.toString() : x));
}

// A binary64 number to be written in SPEC.md Appendix A's number form (a schema's `number`: `scale`,
// `rel_change`), even when its value is integral: Binary64(2) is written `2.0`, the plain 2 `2`.
export class Binary64 {
  constructor(value) {
    if (typeof value !== "number" || !Number.isFinite(value)) throw new TypeError("a finite binary64 number");
    this.value = value;
  }
}

// SPEC.md Appendix A: a binary64 number from its shortest round-trip digits (those of
// toExponential(), which ECMAScript picks as Python's repr does): positional for a decimal exponent
// x with -4 <= x < 16, always with a fraction (`2.0`, `0.0001`), else `d.ddde±XX` with at least two
// exponent digits (`1e-07`, `1.5e+16`).
export function formatBinary64(v) {
  if (!Number.isFinite(v)) throw new TypeError("NaN and infinities are not JSON");
  const sign = v < 0 || Object.is(v, -0) ? "-" : "";
  const [mantissa, exp] = Math.abs(v).toExponential().split("e");
  const digits = mantissa.replace(".", "");
  const x = Number(exp);
  if (x >= -4 && x < 16) {
    if (x < 0) return `${sign}0.${"0".repeat(-x - 1)}${digits}`;
    const whole = digits.slice(0, x + 1).padEnd(x + 1, "0");
    const fraction = digits.slice(x + 1) || "0";
    return `${sign}${whole}.${fraction}`;
  }
  const e = String(Math.abs(x)).padStart(2, "0");
  return `${sign}${digits[0]}${digits.length > 1 ? `.${digits.slice(1)}` : ""}e${x < 0 ? "-" : "+"}${e}`;
}

// SPEC.md Appendix A's canonical form: members sorted by the UTF-8 bytes of their names, no
// whitespace, only `"`, `\` and U+0000-U+001F escaped (as JSON.stringify and Python's json.dumps do),
// integers (BigInt, or a number with an integral value) in decimal, Binary64 numbers and numbers with
// a fraction in the binary64 form.
export function canonicalJSON(v) {
  if (v === null || typeof v === "boolean") return String(v);
  if (typeof v === "string") return JSON.stringify(v);
  if (typeof v === "bigint") return v.toString();
  if (v instanceof Binary64) return formatBinary64(v.value);
  if (typeof v === "number") {
    if (Number.isInteger(v) && !Object.is(v, -0)) {
      if (!Number.isSafeInteger(v)) throw new TypeError("an integer beyond 2^53 is written from a BigInt");
      return String(v);
    }
    return formatBinary64(v);
  }
  if (Array.isArray(v)) return `[${v.map(canonicalJSON).join(",")}]`;
  if (isPlainObject(v)) {
    const keys = Object.keys(v).sort(compareCodePoints);
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJSON(v[k])}`).join(",")}}`;
  }
  throw new TypeError(`not JSON: ${typeof v}`);
}

// Code point order (that of UTF-8 bytes), not the UTF-16 code units of Array.prototype.sort.
function compareCodePoints(a, b) {
  const x = [...a];
  const y = [...b];
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    const d = x[i].codePointAt(0) - y[i].codePointAt(0);
    if (d) return d;
  }
  return x.length - y.length;
}
