// A small, defensive reader of HDF5 on-disk structures, for the storage rules of SPEC.md §8
// that h5wasm does not expose: the data layout (contiguous / chunked / compact / virtual), external
// raw storage, the exact datatype encoding (precision, offset, exponent bias), and where every
// chunk is stored (MD509).
//
// It never follows anything outside the file: every read is bounds-checked against the file size
// and throws RawError otherwise. It starts from object header addresses, which h5wasm gives us as
// HDF5 object references (H5R_OBJECT: the haddr_t of the object header).
//
// Structures implemented (HDF5 File Format Specification, version 3):
//   superblock v0-v3; object header v1 and v2 with continuation blocks; messages: datatype (0x03),
//   external data files (0x07), data layout (0x08) v1-v4; chunk indexes: v1 B-tree (layout v1-v3),
//   single chunk, implicit and fixed array (layout v4). Extensible arrays and v2 B-trees (used only
//   by datasets with unlimited dimensions) are reported as "not verifiable".

import { isUtf8 } from "node:buffer";
import fs from "node:fs";

export class RawError extends Error {}

const SIGNATURE = Buffer.from([0x89, 0x48, 0x44, 0x46, 0x0d, 0x0a, 0x1a, 0x0a]);
export const UNDEF = null;

class Cursor {
  constructor(file, buf, pos, where) {
    this.file = file;
    this.buf = buf;
    this.pos = pos;
    this.where = where;
  }
  need(n) {
    if (this.pos + n > this.buf.length) throw new RawError(`${this.where}: truncated structure`);
  }
  u8() {
    this.need(1);
    return this.buf[this.pos++];
  }
  u16() {
    this.need(2);
    const v = this.buf.readUInt16LE(this.pos);
    this.pos += 2;
    return v;
  }
  u32() {
    this.need(4);
    const v = this.buf.readUInt32LE(this.pos);
    this.pos += 4;
    return v;
  }
  // Unsigned little-endian integer of n bytes, as a BigInt.
  big(n) {
    this.need(n);
    let v = 0n;
    for (let i = n - 1; i >= 0; i--) v = (v << 8n) | BigInt(this.buf[this.pos + i]);
    this.pos += n;
    return v;
  }
  // A length of n bytes as a Number (Infinity when it cannot be exact).
  num(n) {
    const v = this.big(n);
    return v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : Infinity;
  }
  addr() {
    const n = this.file.O;
    this.need(n);
    let allOnes = true;
    for (let i = 0; i < n; i++) if (this.buf[this.pos + i] !== 0xff) allOnes = false;
    if (allOnes) {
      this.pos += n;
      return UNDEF;
    }
    return this.num(n);
  }
  len() {
    return this.num(this.file.L);
  }
  bytes(n) {
    this.need(n);
    const b = this.buf.subarray(this.pos, this.pos + n);
    this.pos += n;
    return b;
  }
  skip(n) {
    this.need(n);
    this.pos += n;
  }
}

export class RawFile {
  constructor(path) {
    this.fd = fs.openSync(path, "r");
    this.size = fs.fstatSync(this.fd).size;
    this.readSuperblock();
  }

  close() {
    if (this.fd !== null) fs.closeSync(this.fd);
    this.fd = null;
  }

  // Reads n bytes at absolute file offset `off`.
  readAbs(off, n, where) {
    if (!Number.isFinite(off) || off < 0 || n < 0 || off + n > this.size) {
      throw new RawError(`${where}: bytes ${off}..${off + n} lie outside the file (${this.size} bytes)`);
    }
    const buf = Buffer.alloc(n);
    let got = 0;
    while (got < n) {
      const r = fs.readSync(this.fd, buf, got, n - got, off + got);
      if (r <= 0) throw new RawError(`${where}: unexpected end of file`);
      got += r;
    }
    return buf;
  }

  // Reads n bytes at HDF5 address `addr` (relative to the base address).
  read(addr, n, where) {
    if (addr === UNDEF) throw new RawError(`${where}: undefined address`);
    return this.readAbs(this.base + addr, n, where);
  }

  // Reads up to n bytes (fewer at the end of the file).
  readUpTo(addr, n, where) {
    if (addr === UNDEF) throw new RawError(`${where}: undefined address`);
    const off = this.base + addr;
    if (!Number.isFinite(off) || off >= this.size) throw new RawError(`${where}: address ${addr} lies outside the file`);
    return this.readAbs(off, Math.min(n, this.size - off), where);
  }

  // Whether [addr, addr + n) lies inside the file.
  within(addr, n) {
    if (addr === UNDEF || !Number.isFinite(addr) || !Number.isFinite(n)) return false;
    return this.base + addr + n <= this.size;
  }

  readSuperblock() {
    let at = -1;
    for (let off = 0; off + 8 <= this.size; off = off === 0 ? 512 : off * 2) {
      if (this.readAbs(off, 8, "superblock").equals(SIGNATURE)) {
        at = off;
        break;
      }
    }
    if (at < 0) throw new RawError("no HDF5 superblock signature");
    const head = this.readAbs(at, Math.min(256, this.size - at), "superblock");
    this.sbVersion = head[8];
    const c = new Cursor(this, head, 9, "superblock");
    if (this.sbVersion === 0 || this.sbVersion === 1) {
      c.skip(4); // free-space, root group symtab, reserved, shared header versions
      this.O = c.u8();
      this.L = c.u8();
      c.skip(1); // reserved
      this.groupLeafK = c.u16(); // a symbol table node's K
      this.groupInternalK = c.u16(); // a group B-tree internal node's K
      c.skip(4); // flags
      if (this.sbVersion === 1) {
        this.chunkK = c.u16(); // indexed storage internal node K
        c.skip(2);
      }
    } else if (this.sbVersion === 2 || this.sbVersion === 3) {
      this.O = c.u8();
      this.L = c.u8();
      c.skip(1);
    } else {
      throw new RawError(`superblock version ${this.sbVersion} is unknown`);
    }
    if (![2, 4, 8].includes(this.O) || ![2, 4, 8].includes(this.L)) throw new RawError("superblock: bad sizes of offsets/lengths");
    const base = c.addr();
    this.base = base === UNDEF ? at : base;
    if (this.base !== at && this.base !== 0) this.base = at;
    const extension = c.addr(); // superblock extension (2, 3) or free-space info (0, 1)
    const eof = c.addr();
    // SPEC §8.3: "within the file" is before the end-of-file address the superblock records, where that is less
    // than the file's size (an HDF5 library reads nothing past it); a base address other than the superblock's
    // place moves that address by as much (as libhdf5 does)
    if (eof !== UNDEF && Number.isFinite(eof)) {
      const end = at + eof - (base === UNDEF || !Number.isFinite(base) ? 0 : base - at);
      this.size = Math.min(this.size, Math.max(0, end));
    }
    if (this.sbVersion >= 2) this.extensionK(extension);
    else if (this.chunkK === undefined) this.chunkK = 32;
  }

  // The B-tree K values of a version 2 or 3 superblock: its extension's "B-tree 'K' values" message (0x13:
  // version, then the K of the chunk index's internal nodes, of a group B-tree's internal nodes, of a symbol table
  // node), else libhdf5's defaults 32, 16 and 4. An extension that cannot be read leaves the defaults: an HDF5
  // library refuses the file whole.
  extensionK(extension) {
    [this.chunkK, this.groupInternalK, this.groupLeafK] = [32, 16, 4];
    if (extension === UNDEF || !Number.isFinite(extension)) return;
    try {
      for (const m of this.readObjectHeader(extension, "superblock extension")) {
        if (m.type !== 0x13) continue;
        if (m.data.length >= 3) this.chunkK = m.data.readUInt16LE(1);
        if (m.data.length >= 7) [this.groupInternalK, this.groupLeafK] = [m.data.readUInt16LE(3), m.data.readUInt16LE(5)];
        return;
      }
    } catch (e) {
      if (!(e instanceof RawError)) throw e;
    }
  }

  // Returns the messages of the object header at `addr`: [{type, flags, data: Buffer}].
  readObjectHeader(addr, where) {
    const msgs = [];
    const first = this.readUpTo(addr, 16, where);
    const blocks = [];
    const seenBlocks = new Set();
    let v2 = false;
    let v2crorder = false;
    if (first.length >= 4 && first.subarray(0, 4).toString("latin1") === "OHDR") {
      v2 = true;
      const c0 = new Cursor(this, first, 4, where);
      const version = c0.u8();
      if (version !== 2) throw new RawError(`${where}: object header version ${version}`);
      const flags = c0.u8();
      let hdr = 6;
      if (flags & 0x20) hdr += 16;
      if (flags & 0x10) hdr += 4;
      const sizeLen = 1 << (flags & 3);
      const h = this.read(addr, hdr + sizeLen, where);
      const c = new Cursor(this, h, hdr, where);
      const chunk0 = c.num(sizeLen);
      blocks.push({ addr: addr + hdr + sizeLen, len: chunk0 });
      v2crorder = (flags & 0x04) !== 0;
    } else {
      const c = new Cursor(this, first, 0, where);
      const version = c.u8();
      if (version !== 1) throw new RawError(`${where}: not an object header (version byte ${version})`);
      c.skip(1);
      c.u16(); // number of messages
      c.u32(); // reference count
      const size = c.u32();
      blocks.push({ addr: addr + 16, len: size });
    }
    let guard = 0;
    while (blocks.length) {
      if (++guard > 100000) throw new RawError(`${where}: too many object header blocks`);
      const b = blocks.shift();
      const key = `${b.addr}`;
      if (seenBlocks.has(key)) throw new RawError(`${where}: object header continuation cycle`);
      seenBlocks.add(key);
      if (b.len > 1 << 30) throw new RawError(`${where}: object header block too large`);
      const buf = this.read(b.addr, b.len, where);
      let pos = 0;
      let end = buf.length;
      if (v2) {
        if (b.cont) {
          if (buf.subarray(0, 4).toString("latin1") !== "OCHK") throw new RawError(`${where}: bad continuation block signature`);
          pos = 4;
        }
        end = b.cont ? buf.length - 4 : buf.length; // chunk 0's length excludes its checksum
        const crorder = v2crorder;
        const hlen = crorder ? 6 : 4;
        while (end - pos >= hlen) {
          const c = new Cursor(this, buf, pos, where);
          const type = c.u8();
          const size = c.u16();
          const mflags = c.u8();
          if (crorder) c.u16();
          const data = c.bytes(size);
          pos = c.pos;
          msgs.push({ type, flags: mflags, data });
          if (type === 0x10) {
            const cc = new Cursor(this, data, 0, where);
            blocks.push({ addr: cc.addr(), len: cc.len(), cont: true });
          }
        }
      } else {
        while (end - pos >= 8) {
          const c = new Cursor(this, buf, pos, where);
          const type = c.u16();
          const size = c.u16();
          const mflags = c.u8();
          c.skip(3);
          const data = c.bytes(size);
          pos = c.pos;
          msgs.push({ type, flags: mflags, data });
          if (type === 0x10) {
            const cc = new Cursor(this, data, 0, where);
            blocks.push({ addr: cc.addr(), len: cc.len(), cont: true });
          }
        }
      }
    }
    return msgs;
  }

  // §8.1 (MD514): the link count the object header at `addr` records — a version 1 header's reference
  // count field; a version 2 header's reference count message (0x16), 1 without one.
  linkCount(addr, where) {
    const first = this.readUpTo(addr, 16, where);
    if (first.length >= 4 && first.subarray(0, 4).toString("latin1") === "OHDR") {
      for (const m of this.readObjectHeader(addr, where)) {
        if (m.type === 0x16) return new Cursor(this, m.data, 1, where).u32();
      }
      return 1;
    }
    const c = new Cursor(this, first, 4, where);
    return c.u32();
  }

  // How many attributes the object whose header is at `addr` has, as an HDF5 library counts them: its
  // attribute messages (compact storage) and the records of its dense storage's name index (a v2 B-tree
  // whose header holds the total). A library that then lists fewer could not read some (SPEC §8.1).
  attributeCount(addr, where) {
    let count = 0;
    for (const m of this.readObjectHeader(addr, where)) {
      if (m.type === 0x0c) count++;
      else if (m.type === 0x15) {
        const c = new Cursor(this, m.data, 0, where);
        c.u8(); // version
        const flags = c.u8();
        if (flags & 1) c.u16(); // maximum creation index
        const heap = c.addr();
        const names = c.addr();
        if (heap === UNDEF || names === UNDEF) continue;
        this.fractalHeap(heap, "attributes", where);
        const total = this.btreeRecords(names, [8], "attribute name index", where);
        if (total <= 64) {
          // SPEC §8.1: no record marks its attribute message shared (flag bit 1, after the 8-byte heap ID)
          for (const record of this.btreeWalk(names, "attribute name index", where)) {
            if (record[8] & 0x02) throw new RawError(`${where}: the attribute name index records a shared attribute message`);
          }
        }
        count += total;
      }
    }
    return count;
  }

  // Checks the link storage of the group whose header is at `addr` (SPEC §8.1) and returns how many links it
  // stores densely: the records of its link name index (a version 2 B-tree of type 5), after its header and that
  // of its creation order index (type 6), when it has one, are checked as the attribute name index's is; null
  // when its links are not stored densely. A symbol table's local heap is checked instead (localHeap).
  checkedLinkCount(addr, where) {
    for (const m of this.readObjectHeader(addr, where)) {
      if (m.type === 0x11) {
        const c = new Cursor(this, m.data, 0, where);
        const btree = c.addr();
        this.symbolTable(btree, this.localHeap(c.addr(), where), where);
        return null;
      }
      if (m.type !== 0x02) continue;
      const c = new Cursor(this, m.data, 0, where);
      c.u8(); // version
      const flags = c.u8();
      if (flags & 1) c.skip(8); // maximum creation index
      const heap = c.addr();
      const names = c.addr();
      if (heap === UNDEF) return null;
      this.fractalHeap(heap, "links", where);
      const total = this.btreeRecords(names, [5], "link name index", where);
      if (flags & 2) {
        const order = c.addr();
        if (order !== UNDEF) this.btreeRecords(order, [6], "link creation order index", where);
      }
      return total;
    }
    return null;
  }

  // SPEC §8.1: a symbol table's local heap has the signature HEAP and version 0, its data segment lies within the
  // file, and its free list, followed from its head to the offset 1, lists blocks that lie in that segment, each
  // with a next offset other than 0, and no more of them than the segment holds blocks of two lengths (a list
  // that loops lists more): libhdf5 follows the list with no bound, allocating until memory runs out. Returns the
  // size of the data segment.
  localHeap(addr, where) {
    const h = new Cursor(this, this.read(addr, 8 + 2 * this.L + this.O, where), 0, where);
    if (h.bytes(4).toString("latin1") !== "HEAP" || h.u8() !== 0) {
      throw new RawError(`${where}: the symbol table's local heap has no HEAP signature of version 0`);
    }
    h.skip(3);
    const size = h.len();
    let at = h.len();
    const data = h.addr();
    if (size && !this.within(data, size)) throw new RawError(`${where}: the local heap's data segment lies outside the file`);
    if (at === 1) return size;
    const segment = new Cursor(this, size ? this.read(data, size, where) : Buffer.alloc(0), 0, where);
    const entry = 2 * this.L;
    for (let i = Math.floor(size / entry); i > 0 && at + entry <= size; i--) {
      segment.pos = at;
      const following = segment.len();
      const length = segment.len();
      if (following === 0 || at + length > size) break;
      if (following === 1) return size;
      at = following;
    }
    throw new RawError(`${where}: the local heap's free list is bad at offset ${at}`);
  }

  // SPEC §8.1: a symbol table's B-tree, read as libhdf5 reads it — each node (TREE, type 0) whole at the size of 2K
  // children, of no more children than that, one level below its parent's; each symbol table node (SNOD, version
  // 1) whole at the size of 2K' entries, of no more entries than that; no node reached twice — records every name
  // (each key of a node, each entry's) at an offset within its local heap's data segment of `heapSize` bytes.
  // libhdf5 refuses an offset past it; h5wasm's sizes are 32 bits, and it reads one of 2^32 or more as another.
  symbolTable(root, heapSize, where) {
    const nodeSize = 8 + 2 * this.O + 2 * this.groupInternalK * this.O + (2 * this.groupInternalK + 1) * this.L;
    const entrySize = 2 * this.O + 24; // name offset, object header address, cache type, reserved, scratch-pad
    const leafSize = 8 + 2 * this.groupLeafK * entrySize;
    const seen = new Set();
    const pending = [[root, null]]; // a node's address and level (null: any; -1: a symbol table node)
    while (pending.length) {
      const [addr, level] = pending.pop();
      if (seen.has(addr)) throw new RawError(`${where}: the symbol table's B-tree reaches a node twice`);
      seen.add(addr);
      if (!this.within(addr, level === -1 ? leafSize : nodeSize)) {
        throw new RawError(`${where}: a node of the symbol table's B-tree does not end within the file`);
      }
      const c = new Cursor(this, this.read(addr, level === -1 ? leafSize : nodeSize, where), 0, where);
      const offsets = [];
      if (level === -1) {
        const signature = c.bytes(4).toString("latin1");
        const version = c.u8();
        c.skip(1);
        const entries = c.u16();
        if (signature !== "SNOD" || version !== 1 || entries > 2 * this.groupLeafK) {
          throw new RawError(`${where}: a symbol table node is not one of version 1 of at most 2K entries`);
        }
        for (let i = 0; i < entries; i++) {
          c.pos = 8 + i * entrySize;
          offsets.push(c.num(this.O));
        }
      } else {
        const signature = c.bytes(4).toString("latin1");
        const type = c.u8();
        const nodeLevel = c.u8();
        const entries = c.u16();
        if (signature !== "TREE" || type !== 0 || entries > 2 * this.groupInternalK || (level !== null && nodeLevel !== level)) {
          throw new RawError(`${where}: a node of the symbol table's B-tree is not one of type 0 of at most 2K children at the level below its parent's`);
        }
        c.pos = 8 + 2 * this.O; // keys and children alternate, a key first and last
        for (let i = 0; i <= entries; i++) {
          offsets.push(c.len());
          if (i < entries) pending.push([c.addr(), nodeLevel - 1]);
        }
      }
      if (offsets.some((offset) => offset >= heapSize)) {
        throw new RawError(`${where}: the symbol table records a name at an offset past its heap's ${heapSize} bytes`);
      }
    }
  }

  // The type each link message of the group whose header is at `addr` records (in the header, or in the fractal
  // heap of its dense storage), by name:
  // 0 hard, 1 soft, 64 external, others user-defined; a name ends at its first NUL, as HDF5 libraries read it.
  // Messages this cannot decode or reach are left out. The map's `notUtf8` counts the names whose bytes are not UTF-8
  // (kept under their lossy decoding).
  linkTypes(addr, where) {
    const types = new Map();
    types.notUtf8 = 0;
    const messages = [];
    for (const m of this.readObjectHeader(addr, where)) {
      if (m.type === 0x06) messages.push(m.data);
      // dense storage: a record of the name index is the name's hash, then a 7-byte heap ID
      if (m.type === 0x02) messages.push(...this.denseMessages(m.data, 8, [4, 11], "link name index", where));
    }
    for (const data of messages) {
      try {
        const c = new Cursor(this, data, 0, where);
        if (c.u8() !== 1) continue; // version
        const flags = c.u8();
        const type = flags & 0x08 ? c.u8() : 0;
        if (flags & 0x04) c.skip(8); // creation order
        if (flags & 0x10) c.u8(); // character set of the name
        const length = c.num(1 << (flags & 3));
        const recorded = c.bytes(length);
        const bytes = recorded.subarray(0, recorded.indexOf(0) < 0 ? length : recorded.indexOf(0)); // as libraries read it
        if (!isUtf8(bytes)) types.notUtf8 += 1;
        types.set(bytes.toString("utf8"), type);
      } catch (e) {
        if (!(e instanceof RawError)) throw e;
      }
    }
    return types;
  }

  // SPEC §8.1: a committed datatype is readable when its datatype message (0x03) decodes — a version from 1 to 5
  // (HDF5 libraries refuse others when they open the object); throws RawError otherwise.
  checkCommittedDatatype(addr, where) {
    const m = this.readObjectHeader(addr, where).find((x) => x.type === 0x03);
    if (!m || m.data.length < 8) throw new RawError(`${where}: no datatype message`);
    const version = m.data[0] >> 4;
    if (version < 1 || version > 5) throw new RawError(`${where}: datatype message version ${version}`);
  }

  // SPEC §8.1: the records in all of the version 2 B-tree whose header is at `addr`, once that header
  // (signature BTHD, version 0) is of a type among `types`, with records of that type's size in nodes of 64 B to
  // 64 KiB, and a root node of no more records than a node of that size holds ((node size - 10) / record
  // size) — HDF5 libraries trust those fields, and crash on others.
  btreeRecords(addr, types, what, where) {
    const hb = this.read(addr, 18 + this.O + this.L, where);
    const h = new Cursor(this, hb, 0, where);
    if (h.bytes(4).toString("latin1") !== "BTHD" || h.u8() !== 0 || !types.includes(h.u8())) {
      throw new RawError(`${where}: the ${what} is not a version 2 B-tree of type ${types.join(" or ")}`);
    }
    const nodeSize = h.u32();
    const recordSize = h.u16();
    // the record of each type, as HDF5 libraries write and read it: a huge object's address and length (1), with
    // its filter mask and size in memory when filtered (2, 4) and its ID when not in its heap ID (1, 2); a link's
    // name hash and 7-byte heap ID (5), its creation order and heap ID (6); an attribute's 8-byte heap ID, flags,
    // creation order and name hash (8)
    const O = this.O;
    const L = this.L;
    const sizes = { 1: O + 2 * L, 2: O + 3 * L + 4, 3: O + L, 4: O + 2 * L + 4, 5: 11, 6: 15, 8: 17 };
    if (recordSize !== sizes[hb[5]] || nodeSize < 64 || nodeSize > 65536) {
      throw new RawError(`${where}: the ${what} has records of ${recordSize} bytes in nodes of ${nodeSize}`);
    }
    const depth = h.u16();
    h.skip(1 + 1); // split and merge percents
    h.addr(); // root node
    const rootRecords = h.u16();
    const total = h.len();
    if (depth > 16 || !Number.isSafeInteger(total)) throw new RawError(`${where}: the ${what} is ${depth} levels deep with ${total} records`);
    // no more records in the root than a node of its depth holds, and in all no fewer than the root holds, no more
    // than a tree of that depth holds — all of them in the root when it is a leaf
    const { most, below } = btreeShape(this.O, nodeSize, recordSize, depth);
    if (rootRecords > most[depth] || total < rootRecords || BigInt(total) > below[depth] || (depth === 0 && total !== rootRecords)) {
      throw new RawError(`${where}: the ${what} records ${total} records in all, ${rootRecords} in its root node, in a tree of depth ${depth} of nodes of ${nodeSize} bytes`);
    }
    return total;
  }

  // SPEC §8.1: the header of the fractal heap that holds an object's dense `what` (attributes or links):
  // signature FRHP, version 0, a table width of at least 1 and, where it records a B-tree of huge objects, at
  // least one huge object and that B-tree's header checked as a name index's (of type 1 to 4). libhdf5 trusts
  // these fields and crashes on others.
  fractalHeap(addr, what, where) {
    const h = new Cursor(this, this.read(addr, 22 + 12 * this.L + 3 * this.O, where), 0, where);
    if (h.bytes(4).toString("latin1") !== "FRHP" || h.u8() !== 0) {
      throw new RawError(`${where}: the fractal heap of the ${what} has no FRHP signature of version 0`);
    }
    h.skip(2 + 2 + 1 + 4); // heap ID length, filter length, flags, largest managed object
    h.len(); // next huge object ID
    const hugeIndex = h.addr();
    h.len(); // free space in managed blocks
    h.addr(); // free space manager
    for (let i = 0; i < 5; i++) h.len(); // managed space, allocated, iterator offset, managed objects, huge bytes
    const hugeObjects = h.len();
    h.len(); // tiny bytes
    h.len(); // tiny objects
    const width = h.u16();
    const firstBlock = h.len();
    const largestBlock = h.len();
    if (width === 0 || firstBlock > largestBlock) {
      throw new RawError(`${where}: the fractal heap of the ${what} has a table width of ${width} and blocks of ${firstBlock} to ${largestBlock} bytes`);
    }
    const offsetBytes = Math.floor((h.u16() + 7) / 8); // from the heap's largest size, in bits
    h.u16(); // starting rows of the root indirect block
    const root = h.addr();
    const rows = h.u16();
    if (root !== UNDEF) {
      // SPEC §8.1: the root block is one of this heap's (a direct block, or an indirect one when the header counts
      // rows of it), version 0, at offset 0 in the heap
      const b = new Cursor(this, this.read(root, 5 + this.O + offsetBytes, where), 0, where);
      if (b.bytes(4).toString("latin1") !== (rows ? "FHIB" : "FHDB") || b.u8() !== 0 || b.addr() !== addr || b.big(offsetBytes) !== 0n) {
        throw new RawError(`${where}: the root block of the fractal heap of the ${what} is not one of its heap at offset 0`);
      }
    }
    if (hugeIndex !== UNDEF) {
      if (hugeObjects === 0) throw new RawError(`${where}: the fractal heap of the ${what} has an index of huge objects and no huge object`);
      const index = `index of huge objects of the ${what}`;
      this.btreeRecords(hugeIndex, [1, 2, 3, 4], index, where);
      for (const record of this.btreeWalk(hugeIndex, index, where)) {
        const c = new Cursor(this, record, 0, where);
        const address = c.num(this.O); // every type's record starts with the object's address and length
        const length = c.len();
        if (!this.within(address, length)) throw new RawError(`${where}: the ${index} records a huge object of ${length} bytes at ${address}, past the end of the file`);
      }
    }
  }

  // SPEC §8.1: every record of the version 2 B-tree whose header (checked by btreeRecords) is at `addr`, its
  // nodes read as libhdf5 reads them: a leaf holds records of the header's size; an internal node holds its
  // records, then one child pointer more — the child's address, its record count and, below depth 1, the
  // records under it, each count in as many bytes as libhdf5's largest count of that kind takes. Every node is
  // of the header's type, holds no more records than a node of its depth can, and the records in all are no
  // more than the header gives.
  btreeWalk(addr, what, where) {
    const h = new Cursor(this, this.read(addr, 18 + this.O + this.L, where), 0, where);
    h.skip(5);
    const type = h.u8();
    const nodeSize = h.u32();
    const size = h.u16();
    const depth = h.u16();
    h.skip(2);
    const root = h.addr();
    const rootRecords = h.u16();
    const total = h.len();
    if (total > 1 << 20) throw new RawError(`${where}: the ${what} holds ${total} records`);
    const { most, pointers, width } = btreeShape(this.O, nodeSize, size, depth);
    const countBytes = width[0];
    const records = [];
    const pending = [[root, rootRecords, depth]];
    while (pending.length) {
      const [node, n, level] = pending.pop();
      if (node === UNDEF || n > most[level] || records.length + n > total) throw new RawError(`${where}: a node of the ${what} records ${n} records`);
      const body = this.read(node, 6 + n * size + (level ? (n + 1) * pointers[level] : 0), where);
      if (body.subarray(0, 4).toString("latin1") !== (level ? "BTIN" : "BTLF") || body[4] !== 0 || body[5] !== type) {
        throw new RawError(`${where}: a node of the ${what} is not a version 2 B-tree node of type ${type}`);
      }
      for (let i = 0; i < n; i++) records.push(body.subarray(6 + i * size, 6 + (i + 1) * size));
      if (!level) continue;
      const c = new Cursor(this, body, 6 + n * size, where);
      for (let i = 0; i <= n; i++) {
        const child = c.addr();
        const childRecords = c.num(countBytes);
        if (level > 1) c.skip(width[level - 1]); // the records under the child
        pending.push([child, childRecords, level - 1]);
      }
    }
    return records;
  }

  // The dataspace class of each attribute stored in the object header at `addr` (compact storage: its
  // attribute messages), by name: 0 scalar, 1 simple, 2 null, or whatever a version 2 dataspace message
  // records there. HDF5 libraries decode other values without an error and differ on what they make of
  // them (h5wasm shows a scalar), so SPEC §8.2's "scalar" is checked on the message's own byte. A message
  // this cannot decode (or whose dataspace is shared) is left out: the library's reading decides it.
  attributeSpaces(addr, where) {
    const spaces = new Map();
    spaces.notUtf8 = 0; // attribute messages whose names are not UTF-8 (kept under their lossy decoding)
    const messages = [];
    for (const m of this.readObjectHeader(addr, where)) {
      if (m.type === 0x0c) messages.push(m.data);
      // dense storage: a record of the name index starts with an 8-byte heap ID
      if (m.type === 0x15) messages.push(...this.denseMessages(m.data, 2, [0, 8], "attribute name index", where));
    }
    for (const data of messages) {
      try {
        const c = new Cursor(this, data, 0, where);
        const version = c.u8();
        const flags = c.u8();
        const nameSize = c.u16();
        const typeSize = c.u16();
        const spaceSize = c.u16();
        if (version === 3) c.u8(); // the name's character set
        const pad = (n) => (version === 1 ? (n + 7) & ~7 : n);
        if (version < 1 || version > 3 || flags & 0x02 || nameSize === 0) continue;
        const raw = c.bytes(nameSize);
        const named = raw.subarray(0, raw.indexOf(0) < 0 ? raw.length : raw.indexOf(0));
        if (!isUtf8(named)) spaces.notUtf8 += 1;
        c.skip(pad(nameSize) - nameSize);
        c.skip(pad(typeSize));
        const s = new Cursor(this, c.bytes(spaceSize), 0, where);
        const sversion = s.u8();
        const rank = s.u8();
        s.u8(); // flags
        const cls = sversion === 2 ? s.u8() : sversion === 1 ? (rank > 0 ? 1 : 0) : null;
        if (cls === null) continue;
        const end = raw.indexOf(0);
        spaces.set(raw.subarray(0, end < 0 ? raw.length : end).toString("utf8"), cls);
      } catch (e) {
        if (!(e instanceof RawError)) throw e;
      }
    }
    return spaces;
  }

  // The messages of a dense storage, given its link info or attribute info message `info` (version, flags, the
  // largest creation index of `indexBytes` when flag bit 0 is set, the fractal heap's address, the name index's):
  // each is the object of the heap whose ID lies at `[from, to)` in a record of the name index. Those it cannot
  // reach are left out (the HDF5 library's reading decides them).
  denseMessages(info, indexBytes, [from, to], what, where) {
    const messages = [];
    try {
      const c = new Cursor(this, info, 0, where);
      c.u8(); // version
      if (c.u8() & 1) c.skip(indexBytes);
      const heap = c.addr();
      const names = c.addr();
      if (heap === UNDEF || names === UNDEF) return messages;
      for (const record of this.btreeWalk(names, what, where)) {
        const data = this.heapObject(heap, record.subarray(from, to), where);
        if (data) messages.push(data);
      }
    } catch (e) {
      if (!(e instanceof RawError)) throw e;
    }
    return messages;
  }

  // The bytes of the object whose ID (a Buffer) is `id` in the fractal heap whose header is at `addr`: a managed
  // object in the heap's root block (a direct block, or a direct block of the root indirect block), a tiny
  // object (in its ID) or an unfiltered huge one; null for others (filtered heaps and blocks deeper down), which
  // are left to the HDF5 library.
  heapObject(addr, id, where) {
    const h = new Cursor(this, this.read(addr, 22 + 12 * this.L + 3 * this.O, where), 0, where);
    h.skip(5);
    const idLength = h.u16();
    const filterLength = h.u16();
    h.skip(1);
    const maxManaged = h.u32();
    h.len(); // next huge object ID
    const hugeIndex = h.addr();
    h.len();
    h.addr();
    for (let i = 0; i < 8; i++) h.len();
    const width = h.u16();
    const startBlock = h.len();
    const maxDirect = h.len();
    const maxHeap = h.u16();
    h.u16();
    const root = h.addr();
    const rows = h.u16();
    if (filterLength || id.length < 1) return null;
    const kind = (id[0] >> 4) & 3;
    if (id[0] >> 6 !== 0) return null;
    const c = new Cursor(this, id, 1, where);
    if (kind === 2) return id.subarray(1, 1 + (id[0] & 0x0f) + 1); // tiny: the length, less one, in the low bits
    if (kind === 1) {
      if (idLength - 1 >= this.O + this.L) return this.read(c.addr(), c.len(), where); // direct: address, length
      const key = c.num(Math.min(idLength - 1, this.L));
      for (const record of this.btreeWalk(hugeIndex, "index of huge objects", where)) {
        const r = new Cursor(this, record, 0, where);
        const address = r.num(this.O);
        const length = r.len();
        if (r.len() === key) return this.read(address, length, where);
      }
      return null;
    }
    if (kind !== 0 || root === UNDEF) return null;
    const log2 = (n) => Math.floor(Math.log2(n));
    const offset = c.num(Math.floor((maxHeap + 7) / 8));
    const length = c.num(Math.min(Math.floor((log2(maxDirect) + 7) / 8), Math.floor(log2(maxManaged) / 8) + 1));
    if (!rows) return this.read(root + offset, length, where);
    // the doubling table: rows 0 and 1 of blocks of the starting size, each further row of blocks twice as large
    let start = 0;
    for (let row = 0; row < rows; row++) {
      const size = row < 2 ? startBlock : startBlock * 2 ** (row - 1);
      if (size > maxDirect) return null; // rows of indirect blocks
      if (offset < start + width * size) {
        const column = Math.floor((offset - start) / size);
        const e = new Cursor(this, this.read(root + 5 + this.O + Math.floor((maxHeap + 7) / 8) + (row * width + column) * this.O, this.O, where), 0, where);
        const block = e.addr();
        if (block === UNDEF) return null;
        return this.read(block + (offset - start - column * size), length, where);
      }
      start += width * size;
    }
    return null;
  }

  // Facts about the dataset whose object header is at `addr`.
  datasetInfo(addr, where) {
    const msgs = this.readObjectHeader(addr, where);
    const info = { external: false, layout: null, datatype: null, sharedDatatype: null };
    // the first message of each type, as libhdf5 reads a header (H5O_msg_read)
    for (const m of msgs) {
      if (m.type === 0x07) info.external = true;
      else if (m.type === 0x08 && info.layout === null) info.layout = this.decodeLayout(m.data, where);
      else if (m.type === 0x03 && info.datatype === null && info.sharedDatatype === null) {
        if (m.flags & 0x02) info.sharedDatatype = this.decodeShared(m.data, where);
        else info.datatype = decodeDatatype(m.data, where);
      }
    }
    return info;
  }

  decodeShared(data, where) {
    const c = new Cursor(this, data, 0, where);
    const version = c.u8();
    const type = c.u8();
    // Version 1 and 2 always point to an object header (a committed datatype);
    // version 3 type 1 is a message in the shared-message heap, type 2 a committed datatype.
    return { committed: version < 3 || type === 2 };
  }

  decodeLayout(data, where) {
    const c = new Cursor(this, data, 0, where);
    const version = c.u8();
    const L = { version };
    if (version === 1 || version === 2) {
      const ndims = c.u8();
      L.cls = c.u8();
      c.skip(5);
      if (L.cls !== 0) L.address = c.addr();
      L.dims = [];
      for (let i = 0; i < ndims; i++) L.dims.push(c.u32());
      if (L.cls === 2) {
        L.chunk = L.dims.slice(0, -1);
        L.keyDims = L.dims;
        L.index = "btree1";
      }
      if (L.cls === 0) L.compactSize = c.u32();
      return L;
    }
    if (version === 3 || version === 4) {
      L.cls = c.u8();
      if (L.cls === 0) {
        L.compactSize = c.u16();
      } else if (L.cls === 1) {
        L.address = c.addr();
        L.size = c.len();
      } else if (L.cls === 2) {
        if (version === 3) {
          const ndims = c.u8();
          L.address = c.addr();
          const dims = [];
          for (let i = 0; i < ndims; i++) dims.push(c.u32());
          L.chunk = dims.slice(0, -1);
          L.keyDims = dims;
          L.index = "btree1";
        } else {
          L.flags = c.u8();
          const ndims = c.u8();
          const enc = c.u8();
          if (enc < 1 || enc > 8) throw new RawError(`${where}: bad chunk dimension encoding`);
          const dims = [];
          for (let i = 0; i < ndims; i++) dims.push(c.num(enc));
          L.chunk = dims.slice(0, -1);
          const it = c.u8();
          if (it === 1) {
            L.index = "single";
            if (L.flags & 0x02) {
              L.filteredSize = c.len();
              L.filterMask = c.u32();
            }
          } else if (it === 2) {
            L.index = "implicit";
          } else if (it === 3) {
            L.index = "farray";
            L.pageBits = c.u8();
          } else if (it === 4) {
            L.index = "earray";
            c.skip(5);
          } else if (it === 5) {
            L.index = "btree2";
            c.skip(6);
          } else {
            throw new RawError(`${where}: unknown chunk index type ${it}`);
          }
          L.address = c.addr();
        }
      } else if (L.cls === 3) {
        L.address = c.addr();
      } else {
        throw new RawError(`${where}: unknown layout class ${L.cls}`);
      }
      return L;
    }
    throw new RawError(`${where}: unknown layout message version ${version}`);
  }

  // Checks MD509 for a chunked dataset. `shape`/`maxshape`: dataset dims; `elemSize`;
  // `deflate`: whether deflate is among the filters. Returns a list of problems (strings).
  // `found`, when given, receives {addr, size} of every chunk that passed (to inflate them bounded, §8.3).
  checkChunks(L, shape, maxshape, elemSize, deflate, filtered, where, found = null, fletcher32 = false) {
    const rank = shape.length;
    const chunk = L.chunk;
    if (chunk.length !== rank) return [`the chunk has rank ${chunk.length}, the dataset ${rank}`];
    if (chunk.some((d) => !(d >= 1))) return ["a chunk dimension is 0"];
    const chunkBytes = chunk.reduce((a, b) => a * b, 1) * elemSize;
    const need = shape.map((d, i) => Math.ceil(d / chunk[i]));
    const nNeeded = need.reduce((a, b) => a * b, 1);
    const problems = [];
    let stored = 0;
    this.indexed = 0; // every chunk of the index, as libhdf5 counts them (H5Dget_num_chunks)
    const sizeOk = (s) => (deflate ? chunkBytes <= 1100 * s : chunkBytes <= s);
    // §8.2: a chunk whose filter mask skips a filter is MD504 (reported with an "MD504:" prefix); it
    // counts as stored, as libhdf5's chunk count does
    const checkOne = (addr, s, label, mask = 0) => {
      if (addr === UNDEF) return false;
      if (mask) {
        problems.push(`MD504:${label} skips some of the dataset's filters (mask ${mask})`);
        return true;
      }
      if (!this.within(addr, s)) {
        problems.push(`${label} does not end within the file`);
        return false;
      }
      if (fletcher32 && s < 4) {
        // SPEC §8.3: with fletcher32 among the filters every stored chunk holds at least its 4-byte checksum
        problems.push(`${label} is too short to hold its fletcher32 checksum`);
        return false;
      }
      if (!sizeOk(s)) {
        problems.push(`${label} stores ${s} bytes for a chunk of ${chunkBytes} bytes`);
        return false;
      }
      if (found) found.push({ addr, size: s });
      return true;
    };
    if (L.index === "single") {
      if (nNeeded > 1) return [`a single-chunk index for ${nNeeded} chunks`];
      const s = L.flags & 0x02 ? L.filteredSize : chunkBytes;
      if (L.address !== UNDEF) this.indexed = 1;
      if (checkOne(L.address, s, "the chunk", L.flags & 0x02 ? L.filterMask : 0)) stored = 1;
    } else if (L.index === "implicit") {
      const grid = (maxshape || shape).map((d, i) => Math.ceil(d / chunk[i]));
      const n = grid.reduce((a, b) => a * b, 1);
      if (L.address !== UNDEF) this.indexed = nNeeded;
      if (L.address !== UNDEF && this.within(L.address, n * chunkBytes)) stored = nNeeded;
      else problems.push("the implicit chunk storage is not allocated within the file");
    } else if (L.index === "farray") {
      const grid = (maxshape && maxshape.every((d) => d !== null && d >= 0) ? maxshape : shape).map((d, i) => Math.ceil(d / chunk[i]));
      stored = this.walkFixedArray(L, grid, need, chunkBytes, checkOne, problems, where);
    } else if (L.index === "btree1") {
      stored = this.walkBtree1(L, shape, chunk, need, checkOne, problems, where);
    } else {
      return [`chunk index type '${L.index}' (a dataset with unlimited dimensions) cannot be verified by this reader`];
    }
    // SPEC §12.1 rule 3: an index that holds another number of chunks than the grid has places is MD509
    // before any chunk's filter mask is looked at (MD504)
    if (this.indexed !== nNeeded) problems.unshift(`COUNT:${this.indexed} chunks are stored for ${nNeeded} places of the chunk grid`);
    if (stored < nNeeded && problems.length === 0) problems.push(`${stored} of ${nNeeded} chunks are stored`);
    else if (stored < nNeeded) problems.push(`${stored} of ${nNeeded} chunks are stored within the file`);
    return problems;
  }

  walkFixedArray(L, grid, need, chunkBytes, checkOne, problems, where) {
    const hb = this.read(L.address, 4 + 4 + this.L + this.O + 4, where);
    const h = new Cursor(this, hb, 0, where);
    if (h.bytes(4).toString("latin1") !== "FAHD") throw new RawError(`${where}: bad fixed array header signature`);
    h.u8();
    const clientId = h.u8();
    const entrySize = h.u8();
    const pageBits = h.u8();
    const n = h.len();
    const dblock = h.addr();
    const expected = grid.reduce((a, b) => a * b, 1);
    if (n !== expected) {
      problems.push(`the chunk index has ${n} entries for ${expected} chunks`);
      return 0;
    }
    if (pageBits > 32) throw new RawError(`${where}: bad fixed array page bits`);
    if (entrySize < this.O || (clientId === 1 && entrySize < this.O + 5)) throw new RawError(`${where}: bad fixed array entry size`);
    if (dblock === UNDEF) return 0;
    const pageSize = 2 ** pageBits;
    const paged = n > pageSize;
    const npages = paged ? Math.ceil(n / pageSize) : 0;
    const prefix = 4 + 1 + 1 + this.O + (paged ? Math.ceil(npages / 8) : 0);
    if (!Number.isSafeInteger(n * entrySize) || n * entrySize > this.size) throw new RawError(`${where}: fixed array larger than the file`);
    const pb = this.read(dblock, prefix, where);
    if (pb.subarray(0, 4).toString("latin1") !== "FADB") throw new RawError(`${where}: bad fixed array data block signature`);
    const bitmap = paged ? pb.subarray(prefix - Math.ceil(npages / 8)) : null;
    let stored = 0;
    const rank = grid.length;
    const coord = new Array(rank);
    const visit = (i, buf, pos) => {
      const c = new Cursor(this, buf, pos, where);
      const addr = c.addr();
      let s = null;
      let mask = 0;
      if (clientId === 1) {
        s = c.num(entrySize - this.O - 4);
        mask = c.u32();
      }
      // linear index i -> chunk coordinates in the grid
      let r = i;
      for (let d = rank - 1; d >= 0; d--) {
        coord[d] = r % grid[d];
        r = Math.floor(r / grid[d]);
      }
      if (addr !== UNDEF) this.indexed++;
      const needed = coord.every((x, d) => x < need[d]);
      if (!needed) return;
      if (checkOne(addr, clientId === 1 ? s : chunkBytes, `chunk ${i}`, mask)) stored++;
    };
    if (!paged) {
      const eb = this.read(dblock + prefix, n * entrySize, where);
      for (let i = 0; i < n; i++) visit(i, eb, i * entrySize);
    } else {
      let pageAddr = dblock + prefix + 4; // the data block prefix has its own checksum
      for (let p = 0; p < npages; p++) {
        const count = p === npages - 1 ? n - p * pageSize : pageSize;
        const init = (bitmap[p >> 3] >> (7 - (p & 7))) & 1;
        if (init) {
          const eb = this.read(pageAddr, count * entrySize, where);
          for (let k = 0; k < count; k++) visit(p * pageSize + k, eb, k * entrySize);
        }
        pageAddr += count * entrySize + 4;
      }
    }
    return stored;
  }

  walkBtree1(L, shape, chunk, need, checkOne, problems, where) {
    const rank = shape.length;
    const keySize = 4 + 4 + 8 * (rank + 1);
    const seenNodes = new Set();
    const seenChunks = new Set();
    let stored = 0;
    let nodes = 0;
    const walk = (addr, depth) => {
      if (addr === UNDEF) return;
      if (depth > 64) throw new RawError(`${where}: chunk B-tree too deep`);
      if (seenNodes.has(addr)) throw new RawError(`${where}: chunk B-tree node visited twice`);
      seenNodes.add(addr);
      if (++nodes > 10000000) throw new RawError(`${where}: chunk B-tree too large`);
      // SPEC §8.3: a node is read whole, at the size of one of 2K entries, and must end within the file
      const nodeSize = 8 + 2 * this.O + 2 * this.chunkK * this.O + (2 * this.chunkK + 1) * keySize;
      if (!this.within(addr, nodeSize)) throw new RawError(`${where}: a chunk B-tree node of ${nodeSize} bytes does not end within the file`);
      const hb = this.read(addr, 8 + 2 * this.O, where);
      const h = new Cursor(this, hb, 0, where);
      if (h.bytes(4).toString("latin1") !== "TREE") throw new RawError(`${where}: bad B-tree node signature`);
      const type = h.u8();
      const level = h.u8();
      const entries = h.u16();
      if (type !== 1) throw new RawError(`${where}: B-tree node of type ${type} in a chunk index`);
      const body = this.read(addr + 8 + 2 * this.O, entries * (keySize + this.O) + keySize, where);
      // libhdf5 decodes every key of a node it reads and refuses the node (so the whole index: "bad coordinate
      // offset") when an offset is not a multiple of its dimension of the chunk — the element size the last
      // (SPEC §8.3: an index that cannot be read is MD513)
      const dims = (L.keyDims || []).map((x) => BigInt(x));
      for (let k = 0; k <= entries; k++) {
        const kc = new Cursor(this, body, k * (keySize + this.O) + 8, where);
        for (let d = 0; d <= rank; d++) {
          const off = kc.big(8);
          if (d < dims.length && (dims[d] === 0n || off % dims[d] !== 0n)) {
            throw new RawError(`${where}: a chunk index key's offset ${off} is not a multiple of ${dims[d]} (bad coordinate offset)`);
          }
        }
      }
      const c = new Cursor(this, body, 0, where);
      for (let e = 0; e < entries; e++) {
        const size = c.u32();
        const mask = c.u32();
        const offs = [];
        for (let d = 0; d <= rank; d++) offs.push(c.num(8));
        const child = c.addr();
        if (level > 0) {
          walk(child, depth + 1);
          continue;
        }
        let lin = 0;
        let ok = true;
        for (let d = 0; d < rank; d++) {
          if (offs[d] % chunk[d] !== 0 || offs[d] >= shape[d]) ok = false;
          lin = lin * need[d] + Math.floor(offs[d] / chunk[d]);
        }
        if (child !== UNDEF) this.indexed++; // every chunk of the index, as libhdf5 counts them (H5Dget_num_chunks)
        if (!ok) {
          // its filter mask is looked at as every chunk's is (MD504 before the rest of §8.3, SPEC §12.1 rule 3)
          if (mask) problems.push(`MD504:a chunk at [${offs.slice(0, rank).join(", ")}] skips some of the dataset's filters (mask ${mask})`);
          problems.push(`a chunk at [${offs.slice(0, rank).join(", ")}] lies off the chunk grid or outside the dataset`);
          continue;
        }
        if (seenChunks.has(lin)) {
          problems.push(`chunk ${lin} is listed twice`);
          continue;
        }
        seenChunks.add(lin);
        if (checkOne(child, size, `chunk ${lin}`, mask)) stored++;
      }
    };
    walk(L.address, 0);
    return stored;
  }
}

// For each depth of a version 2 B-tree, as libhdf5 reckons it: the records a node holds (`most`), the records a
// subtree holds (`below`, BigInt), the bytes of a child pointer in a node (`pointers`: the child's address, its
// record count and, below depth 1, the records under it) and the bytes of those counts (`width`: as many as the
// largest such count takes, libhdf5's H5VM_limit_enc_size).
function btreeShape(O, nodeSize, recordSize, depth) {
  const bytes = (n) => (n > 0n ? Math.floor((n.toString(2).length - 1) / 8) + 1 : 1);
  const most = [Math.floor((nodeSize - 10) / recordSize)];
  const below = [BigInt(most[0])];
  const width = [bytes(below[0])];
  const pointers = [0];
  for (let level = 1; level <= depth; level++) {
    const pointer = O + width[0] + (level > 1 ? bytes(below[level - 1]) : 0);
    pointers.push(pointer);
    most.push(Math.floor((nodeSize - 10 - pointer) / (recordSize + pointer)));
    below.push(BigInt(most[level] + 1) * below[level - 1] + BigInt(most[level]));
    width.push(bytes(below[level]));
  }
  return { most, below, pointers, width };
}

// Decodes a datatype message far enough for §8.2's rule (MD505).
export function decodeDatatype(data, where) {
  if (data.length < 8) throw new RawError(`${where}: truncated datatype message`);
  const cls = data[0] & 0x0f;
  const bits = data[1] | (data[2] << 8) | (data[3] << 16);
  const size = data.readUInt32LE(4);
  const t = { cls, size, bits };
  if (cls === 0 && data.length >= 12) {
    t.littleEndian = (bits & 1) === 0;
    t.signed = (bits & 8) !== 0;
    t.offset = data.readUInt16LE(8);
    t.precision = data.readUInt16LE(10);
  } else if (cls === 1 && data.length >= 20) {
    t.littleEndian = (bits & 1) === 0 && (bits & 0x40) === 0;
    t.norm = (bits >> 4) & 3;
    t.signLoc = (bits >> 8) & 0xff;
    t.offset = data.readUInt16LE(8);
    t.precision = data.readUInt16LE(10);
    t.expLoc = data[12];
    t.expSize = data[13];
    t.mantLoc = data[14];
    t.mantSize = data[15];
    t.bias = data.readUInt32LE(16);
  }
  return t;
}

// Whether a decoded datatype is one that §8.2 allows; returns null or the reason it is not.
export function datatypeProblem(t) {
  if (t.cls === 0) {
    if (![1, 2, 4, 8].includes(t.size)) return `an integer of ${t.size} bytes`;
    if (!t.littleEndian && t.size > 1) return "a big-endian integer";
    if (t.offset !== 0 || t.precision !== 8 * t.size) return `an integer with bit offset ${t.offset} and precision ${t.precision}`;
    if (t.bits & 0x06) return "an integer whose padding is not zeros"; // bits 1-2: the lsb and msb padding types
    // every other bit the standard type's: the sign (bit 3), nothing reserved
    if (t.bits !== (t.signed ? 0x08 : 0)) return `an integer whose class bit field is 0x${t.bits.toString(16)}`;
    return null;
  }
  if (t.cls === 1) {
    const std = {
      4: { precision: 32, expLoc: 23, expSize: 8, mantLoc: 0, mantSize: 23, bias: 127, signLoc: 31 },
      8: { precision: 64, expLoc: 52, expSize: 11, mantLoc: 0, mantSize: 52, bias: 1023, signLoc: 63 },
    }[t.size];
    if (!std) return `a float of ${t.size} bytes`;
    if (!t.littleEndian) return "a float that is not little-endian";
    for (const [k, v] of Object.entries(std)) if (t[k] !== v) return `a float with non-standard ${k} ${t[k]}`;
    if (t.offset !== 0 || t.norm !== 2) return "a float with a non-standard bit offset or mantissa normalisation";
    if (t.bits & 0x0e) return "a float whose padding is not zeros"; // bits 1-3: the lsb, msb and internal padding types
    // every other bit the standard type's: normalisation 2 (bits 4-5), the sign's place (bits 8-15), nothing reserved
    if (t.bits !== (0x20 | (std.signLoc << 8))) return `a float whose class bit field is 0x${t.bits.toString(16)}`;
    return null;
  }
  return `datatype class ${t.cls}`;
}
