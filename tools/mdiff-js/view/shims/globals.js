// What mdiff-js's modules expect of Node's globals, for the browser: Buffer and an empty process.env.
// Imported first by the worker (worker.js, load.js), so that it runs before any module of src/ is evaluated.
import { Buffer } from "./buffer.js";

if (typeof globalThis.Buffer === "undefined") globalThis.Buffer = Buffer;
if (typeof globalThis.process === "undefined") globalThis.process = { env: {}, platform: "browser" };
