// The one place the client page takes its training API from: otter's package, whose API is
// onnxruntime-web 1.19.2's training API (TrainingSession, Tensor, env). Pointing this line at another
// module with that API (e.g. a wrapper exporting onnxruntime-web's global `ort`) is all it takes to switch.
export { TrainingSession, Tensor, env } from '../dist/otter.mjs';
