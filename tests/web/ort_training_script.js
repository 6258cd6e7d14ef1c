// A training script written for onnxruntime-web 1.19.2's training API, run unchanged against onnxruntime-web and
// against otter-onnx (only the module path differs): FLAT's browser client loop on fixed batches.
// usage: node ort_training_script.js MODULE ARTIFACTS_DIR X.f32 Y.i64 STEPS BATCH OUT.json
'use strict';
const fs = require('fs');
const path = require('path');

const [modulePath, dir, xFile, yFile, steps, batch, outFile] = process.argv.slice(2);
const ort = require(modulePath);
ort.env.wasm.numThreads = 1;

async function main() {
  const bytes = (name) => new Uint8Array(fs.readFileSync(path.join(dir, name)));
  const session = await ort.TrainingSession.create({
    checkpointState: bytes('checkpoint'),
    trainModel: bytes('training_model.onnx'),
    evalModel: bytes('eval_model.onnx'),
    optimizerModel: bytes('optimizer_model.onnx'),
  });
  // Copies (fs may hand back a view into a shared pool).
  const xAll = new Float32Array(new Uint8Array(fs.readFileSync(xFile)).buffer);
  const yAll = new BigInt64Array(new Uint8Array(fs.readFileSync(yFile)).buffer);
  const n = Number(batch);
  const features = xAll.length / yAll.length;
  const [inputName, labelName] = session.trainingInputNames;
  const lossName = session.trainingOutputNames[0];
  const losses = [];
  for (let step = 0; step < Number(steps); step++) {
    const x = xAll.slice(step * n * features, (step + 1) * n * features);
    const y = yAll.slice(step * n, (step + 1) * n);
    const feeds = {
      [inputName]: new ort.Tensor('float32', x, [n, features]),
      [labelName]: new ort.Tensor('int64', y, [n]),
    };
    const result = await session.runTrainStep(feeds);
    losses.push(result[lossName].data[0]);
    await session.runOptimizerStep();
    await session.lazyResetGrad();
  }
  const evalResult = await session.runEvalStep({
    [inputName]: new ort.Tensor('float32', xAll.slice(0, n * features), [n, features]),
    [labelName]: new ort.Tensor('int64', yAll.slice(0, n), [n]),
  });
  const params = await session.getContiguousParameters(true);
  const out = {
    trainingInputNames: session.trainingInputNames, trainingOutputNames: session.trainingOutputNames,
    evalInputNames: session.evalInputNames, evalOutputNames: session.evalOutputNames,
    parametersSize: await session.getParametersSize(true), losses,
    evalLoss: evalResult[session.evalOutputNames[0]].data[0],
    paramsHead: Array.from(params.data.slice(0, 8)), paramsType: params.type, paramsDims: params.dims,
  };
  // A round trip through loadParametersBuffer: the parameters come back unchanged.
  await session.loadParametersBuffer(new Uint8Array(params.data.buffer), true);
  const again = await session.getContiguousParameters(true);
  out.reloadSame = again.data.every((v, i) => v === params.data[i]);
  await session.release();
  fs.writeFileSync(outFile, JSON.stringify(out));
}
main().catch((e) => {
  console.error(`error: ${e.message}`);
  process.exit(1);
});
