// SPEC.md §13.7: the three-way merge of parameters, as conformance/README.md's `merge-file` asks for it —
// three states (ours, base, theirs: Maps name -> {dtype, shape, data}, as readSafetensors returns them)
// merged parameter by parameter; a strategy resolves the conflicts, or with `all` decides every parameter.
//
// A value is absent or (dtype, shape, bytes); two values are the same when both are absent or all three
// are equal: bytes, not numbers (+0 and -0 differ, a NaN equals only its own bit pattern).

import { DTYPES } from "./dtypes.js";
import { READ_ELEMENT, WRITE_ELEMENT } from "./elements.js";
import { compareUtf8 } from "./names.js";

// "ours", "theirs", "average", "weighted:ALPHA", "task-arithmetic", "task-arithmetic:LAMBDA" ->
// { name, side, weight }; null when the text is none of them. ALPHA and LAMBDA are decimal numbers, read
// as the nearest binary64 (Number() does so), and must be finite.
const DECIMAL = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;

export function parseStrategy(text) {
  const colon = text.indexOf(":");
  const name = colon < 0 ? text : text.slice(0, colon);
  const arg = colon < 0 ? null : text.slice(colon + 1);
  const number = (s) => (DECIMAL.test(s) && Number.isFinite(Number(s)) ? Number(s) : null);
  if ((name === "ours" || name === "theirs") && arg === null) return { name, side: name, weight: null };
  if (name === "average" && arg === null) return { name: "weighted", side: null, weight: 0.5 };
  if (name === "weighted" && arg !== null && number(arg) !== null) return { name, side: null, weight: number(arg) };
  if (name === "task-arithmetic") {
    if (arg === null) return { name, side: null, weight: 1 };
    if (number(arg) !== null) return { name, side: null, weight: number(arg) };
  }
  return null;
}

function sameSpec(a, b) {
  return a.dtype === b.dtype && a.shape.length === b.shape.length && a.shape.every((d, i) => d === b.shape[i]);
}

export function sameValue(a, b) {
  if (a === undefined || b === undefined) return a === b;
  return sameSpec(a, b) && a.data.equals(b.data);
}

function specText(v) {
  return `${v.dtype}[${v.shape.join(", ")}]`;
}

// Why a combining strategy cannot combine these values, or null when it can.
function whyNot(strategy, o, t, b) {
  if (o === undefined || t === undefined) return "it is absent on one side";
  if (!sameSpec(o, t)) return "its shape or dtype differs between the sides";
  if (!DTYPES[o.dtype].float) return `${o.dtype} is not a floating-point dtype`;
  if (strategy.name === "task-arithmetic" && (b === undefined || !sameSpec(b, o))) {
    return "the merge base lacks it or holds it in another shape or dtype";
  }
  return null;
}

function conflictReason(o, t, b) {
  if (o === undefined) return "deleted in ours, changed in theirs";
  if (t === undefined) return "changed in ours, deleted in theirs";
  if (b === undefined) return "added on both sides with different values";
  if (!sameSpec(o, t)) return `reshaped or retyped differently: ours ${specText(o)}, theirs ${specText(t)}`;
  return "changed differently on both sides";
}

function view(data) {
  return new DataView(data.buffer, data.byteOffset, data.byteLength);
}

// weighted: (α × ours) + ((1 − α) × theirs); task-arithmetic: base + (λ × ((ours − base) + (theirs − base))):
// JavaScript numbers are binary64, so each operation is rounded as §13.7 asks, in the order written.
function combine(strategy, o, t, b) {
  const n = o.data.length / DTYPES[o.dtype].size;
  const out = Buffer.alloc(o.data.length);
  const [ov, tv, bv, rv] = [view(o.data), view(t.data), b ? view(b.data) : null, view(out)];
  const read = READ_ELEMENT[o.dtype]; // a float tensor's element as binary64, exactly
  const write = WRITE_ELEMENT[o.dtype]; // a binary64 number rounded once to the dtype
  const w = strategy.weight;
  for (let i = 0; i < n; i++) {
    const x = read(ov, i);
    const y = read(tv, i);
    let r;
    if (strategy.name === "weighted") r = w * x + (1 - w) * y;
    else {
      const z = read(bv, i);
      r = z + w * (x - z + (y - z));
    }
    write(rv, i, r);
  }
  return { dtype: o.dtype, shape: o.shape.slice(), data: out };
}

// The merge: { merged: Map name -> value (in name order), conflicts: [{name, reason}] }.
export function mergeStates(ours, base, theirs, strategy = null, all = false) {
  const names = [...new Set([...ours.keys(), ...base.keys(), ...theirs.keys()])].sort(compareUtf8);
  const merged = new Map();
  const conflicts = [];
  for (const name of names) {
    const o = ours.get(name);
    const b = base.get(name);
    const t = theirs.get(name);
    const take = (v) => {
      if (v !== undefined) merged.set(name, v);
    };
    if (strategy && all && strategy.side) {
      take(strategy.side === "ours" ? o : t); // that side's state, whole
      continue;
    }
    if (sameValue(o, t)) {
      take(o); // unchanged, changed alike, or deleted on both sides
      continue;
    }
    if (strategy && all && !strategy.side && whyNot(strategy, o, t, b) === null) {
      merged.set(name, combine(strategy, o, t, b));
      continue;
    }
    if (sameValue(o, b)) {
      take(t); // changed, added or deleted in theirs only
      continue;
    }
    if (sameValue(t, b)) {
      take(o);
      continue;
    }
    const reason = conflictReason(o, t, b);
    if (!strategy) {
      conflicts.push({ name, reason });
    } else if (strategy.side) {
      take(strategy.side === "ours" ? o : t);
    } else {
      const why = whyNot(strategy, o, t, b);
      if (why === null) merged.set(name, combine(strategy, o, t, b));
      else conflicts.push({ name, reason: `${reason}; the strategy cannot combine it: ${why}` });
    }
  }
  return { merged, conflicts };
}
