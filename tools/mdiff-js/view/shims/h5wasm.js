// `h5wasm/node` for the browser: h5wasm's ES module build (HDF5 compiled to WebAssembly, the binary inside
// the module), whose files live in its in-memory filesystem (load.js writes each one there).
import h5wasm from "../../node_modules/h5wasm/dist/esm/hdf5_hl.js";

export default h5wasm;
