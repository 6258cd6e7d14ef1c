'use strict';
// For tests/web/test_web_training.py: runs MODEL with otter-onnx's InferenceSession on float32 inputs read from
// files (one FILE:D0,D1,... per model input, in its order) and writes each output's bytes to OUT.<output name>.bin.
//   node maxpool_script.js PACKAGE MODEL OUT FILE:DIMS ...
const fs = require('fs');
const [pkg, model, out, ...inputs] = process.argv.slice(2);
const otter = require(pkg);

(async () => {
  const session = await otter.InferenceSession.create(model);
  const feeds = {};
  session.inputNames.forEach((name, i) => {
    const [file, dims] = inputs[i].split(':');
    const data = new Float32Array(new Uint8Array(fs.readFileSync(file)).buffer);
    feeds[name] = new otter.Tensor('float32', data, dims.split(',').map(Number));
  });
  const results = await session.run(feeds);
  for (const name of session.outputNames) fs.writeFileSync(`${out}.${name}.bin`, Buffer.from(results[name].data.buffer));
  await session.release();
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
