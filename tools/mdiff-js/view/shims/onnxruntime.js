// `onnxruntime-node` for the browser: the page validates and inspects files; it never runs an embedded
// update type's function (src/embedded.js loads the runtime only to apply one).
const unavailable = () => {
  throw new Error("embedded update types are not run in the browser (apply the file with mdiff or mdiff-js)");
};
export default { InferenceSession: { create: unavailable }, Tensor: unavailable };
