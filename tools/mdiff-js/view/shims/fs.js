// `node:fs` for the browser, as far as src/h5raw.js reads files: the page registers a file's bytes under a
// path (the same path h5wasm opens in its in-memory filesystem) and the raw reader reads them by position.

const files = new Map(); // path -> Uint8Array
const open = new Map(); // fd -> Uint8Array
let nextFd = 3;

export function register(path, bytes) {
  files.set(path, bytes);
}

export function unregister(path) {
  files.delete(path);
}

function missing(path) {
  const e = new Error(`ENOENT: no such file, open '${path}'`);
  e.code = "ENOENT";
  return e;
}

export function openSync(path) {
  const bytes = files.get(String(path));
  if (!bytes) throw missing(path);
  const fd = nextFd++;
  open.set(fd, bytes);
  return fd;
}

export function fstatSync(fd) {
  const bytes = open.get(fd);
  if (!bytes) throw new Error(`EBADF: bad file descriptor ${fd}`);
  return { size: bytes.length, isFile: () => true };
}

export function readSync(fd, buffer, offset, length, position) {
  const bytes = open.get(fd);
  if (!bytes) throw new Error(`EBADF: bad file descriptor ${fd}`);
  const start = Number(position);
  if (start >= bytes.length) return 0;
  const part = bytes.subarray(start, Math.min(bytes.length, start + length));
  buffer.set(part, offset);
  return part.length;
}

export function closeSync(fd) {
  open.delete(fd);
}

export default { register, unregister, openSync, fstatSync, readSync, closeSync };
