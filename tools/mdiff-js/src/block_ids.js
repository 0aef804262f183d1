// §4.3: commit ids — a format-2 repository names a commit file by the SHA-256 of its block list's head, a
// format-1 one by the SHA-256 of its bytes. Its own module (Node's crypto and Buffer only), so that the
// browser page (view/) checks ids with this very code.
import crypto from "node:crypto";
import { Buffer } from "node:buffer";

const LEAF = 8192; // §4.3: bytes of a leaf
const GROUP = 128; // leaves of a group (1 MiB of the file)

// §4.3: a format-2 commit id, from the file's bytes given in order: the SHA-256 of the block list's
// head (the length, 8 bytes big-endian, then each group's hash of its leaves' hashes).
export class BlockIdHasher {
  constructor() {
    this.length = 0;
    this.pending = Buffer.alloc(0);
    this.leaves = []; // leaf hashes of the group being filled
    this.groups = [];
  }
  leaf(bytes) {
    this.leaves.push(crypto.createHash("sha256").update(bytes).digest());
    if (this.leaves.length === GROUP) this.closeGroup();
  }
  closeGroup() {
    if (this.leaves.length) this.groups.push(crypto.createHash("sha256").update(Buffer.concat(this.leaves)).digest());
    this.leaves = [];
  }
  update(chunk) {
    this.length += chunk.length;
    let data = this.pending.length ? Buffer.concat([this.pending, chunk]) : Buffer.from(chunk);
    let at = 0;
    for (; at + LEAF <= data.length; at += LEAF) this.leaf(data.subarray(at, at + LEAF));
    this.pending = Buffer.from(data.subarray(at));
    return this;
  }
  digest() {
    if (this.pending.length) this.leaf(this.pending);
    this.pending = Buffer.alloc(0);
    this.closeGroup();
    const length = Buffer.alloc(8);
    length.writeBigUInt64BE(BigInt(this.length));
    return crypto.createHash("sha256").update(Buffer.concat([length, ...this.groups])).digest("hex");
  }
}

// The commit id of `bytes` in a repository of `format` (1 or 2).
export function commitIdOf(bytes, format) {
  const hash = format === 2 ? new BlockIdHasher() : crypto.createHash("sha256");
  return hash.update(bytes).digest("hex");
}
