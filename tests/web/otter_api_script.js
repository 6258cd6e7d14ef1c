// What otter-onnx adds to onnxruntime-web's API, driven by test_web_training.py (which checks the results against
// the native library and the CLI): training otter-made CNN artifacts, saveCheckpoint, exportModelForInferencing,
// InferenceSession, generateArtifacts, learning-rate schedules, and rejected promises for bad inputs.
// usage: node otter_api_script.js PACKAGE WORK_DIR   (WORK_DIR holds the inputs named below; results go there)
'use strict';
const fs = require('fs');
const path = require('path');

const [pkg, work] = process.argv.slice(2);
const otter = require(pkg);
const file = (name) => path.join(work, name);
const read = (name) => new Uint8Array(fs.readFileSync(file(name)));
// A copy (fs may hand back a view into a shared pool).
const typed = (Ctor, name) => new Ctor(new Uint8Array(fs.readFileSync(file(name))).buffer);
const f32 = (name) => typed(Float32Array, name);
const i64 = (name) => typed(BigInt64Array, name);

// steps train steps (each one optimizer update) on consecutive batches; returns the losses.
async function train(session, x, y, dims, steps) {
  const n = dims[0];
  const per = x.length / y.length;
  const losses = [];
  for (let s = 0; s < steps; s++) {
    const r = await session.runTrainStep({
      [session.trainingInputNames[0]]: new otter.Tensor('float32', x.slice(s * n * per, (s + 1) * n * per), dims),
      [session.trainingInputNames[1]]: new otter.Tensor('int64', y.slice(s * n, (s + 1) * n), [n]),
    });
    losses.push(r[session.trainingOutputNames[0]].data[0]);
    await session.runOptimizerStep();
    await session.lazyResetGrad();
  }
  return losses;
}

async function rejection(promise) {
  try {
    await promise;
    return null;
  } catch (e) {
    return e.message;
  }
}

async function main() {
  const out = {};
  // CNN artifacts made by `otter artifacts`, given as paths.
  const cnn = (name) => path.join(work, 'cnn', name);
  const session = await otter.TrainingSession.create({
    checkpointState: cnn('checkpoint'), trainModel: cnn('training_model.onnx'), evalModel: cnn('eval_model.onnx'),
    optimizerModel: cnn('optimizer_model.onnx'),
  });
  const cx = f32('cnn_x.f32');
  const cy = i64('cnn_y.i64');
  out.cnnLosses = await train(session, cx, cy, [4, 3, 32, 32], 3);
  out.stepCount = await session.getStepCount();

  // Checkpoint bytes: the Python side reads them with `otter checkpoint info`; here they resume a session.
  const ckpt = await session.saveCheckpoint();
  fs.writeFileSync(file('web_checkpoint'), ckpt);
  const resumed = await otter.TrainingSession.create({
    checkpointState: ckpt, trainModel: cnn('training_model.onnx'), optimizerModel: cnn('optimizer_model.onnx'),
  });
  const p0 = (await session.getContiguousParameters()).data;
  const p1 = (await resumed.getContiguousParameters()).data;
  out.resumedSame = p0.length === p1.length && p0.every((v, i) => v === p1[i]);
  out.resumedStepCount = await resumed.getStepCount();
  await resumed.release();

  // The inference model, run by InferenceSession here and by `otter run` on the Python side.
  const model = await session.exportModelForInferencing();
  fs.writeFileSync(file('web_exported.onnx'), model);
  const inference = await otter.InferenceSession.create(model);
  out.inferenceInputNames = inference.inputNames;
  out.inferenceOutputNames = inference.outputNames;
  const ix = cx.slice(0, 2 * 3 * 32 * 32);
  const result = await inference.run({ [inference.inputNames[0]]: new otter.Tensor('float32', ix, [2, 3, 32, 32]) });
  const logits = result[inference.outputNames[0]];
  out.inferenceDims = logits.dims;
  fs.writeFileSync(file('web_logits.f32'), Buffer.from(logits.data.buffer));
  await inference.release();

  // Learning rate: set, and a linear schedule followed by schedulerStep.
  await session.setLearningRate(0.01);
  out.lrSet = await session.getLearningRate();
  await session.setLearningRateSchedule({ type: 'linear', initialLR: 0.1, warmupSteps: 0, totalSteps: 13 });
  out.lrAtStep3 = await session.getLearningRate();
  await session.runTrainStep({
    [session.trainingInputNames[0]]: new otter.Tensor('float32', cx.slice(0, 4 * 3072), [4, 3, 32, 32]),
    [session.trainingInputNames[1]]: new otter.Tensor('int64', cy.slice(0, 4), [4]),
  });
  await session.runOptimizerStep();
  await session.schedulerStep();
  out.lrAtStep4 = await session.getLearningRate();

  // Bad inputs reject with otter's message.
  const ok = { [session.trainingInputNames[1]]: new otter.Tensor('int64', cy.slice(0, 4), [4]) };
  const x4 = cx.slice(0, 4 * 3072);
  const xName = session.trainingInputNames[0];
  out.errors = {
    truncatedModel: await rejection(otter.TrainingSession.create({
      checkpointState: cnn('checkpoint'), trainModel: read('cnn/training_model.onnx').slice(0, 1000),
    })),
    truncatedCheckpoint: await rejection(otter.TrainingSession.create({
      checkpointState: read('cnn/checkpoint').slice(0, 100), trainModel: cnn('training_model.onnx'),
    })),
    wrongDtype: await rejection(session.runTrainStep({
      ...ok, [xName]: new otter.Tensor('float64', Float64Array.from(x4), [4, 3, 32, 32]) })),
    wrongShape: await rejection(session.runTrainStep({
      ...ok, [xName]: new otter.Tensor('float32', x4.slice(0, 4 * 3 * 16 * 32), [4, 3, 16, 32]) })),
    unknownInput: await rejection(session.runTrainStep({
      ...ok, [xName]: new otter.Tensor('float32', x4, [4, 3, 32, 32]), no_such_input: new otter.Tensor('float32', [1], [1]) })),
    missingInput: await rejection(session.runTrainStep(ok)),
    badParameterBuffer: await rejection(session.loadParametersBuffer(new Uint8Array(12), true)),
    missingFile: await rejection(otter.InferenceSession.create(file('no_such_model.onnx'))),
  };
  await session.release();
  out.afterRelease = await rejection(session.runOptimizerStep());

  // generateArtifacts from a forward model's bytes, then trained on the MNIST batches.
  const art = await otter.generateArtifacts(read('mnist_dnn.onnx'), { loss: 'CrossEntropyLoss', optimizer: 'AdamW' });
  for (const [k, v] of Object.entries(art)) fs.writeFileSync(file(`gen_${k}`), v);
  const gen = await otter.TrainingSession.create(art);
  out.generatedLosses = await train(gen, f32('x.f32'), i64('y.i64'), [32, 784], 5);
  await gen.release();
  out.generateErrors = {
    badLoss: await rejection(otter.generateArtifacts(read('mnist_dnn.onnx'), { loss: 'HingeLoss' })),
    badFrozen: await rejection(otter.generateArtifacts(read('mnist_dnn.onnx'), {
      loss: 'CrossEntropyLoss', requiresGrad: ['no_such_initializer'] })),
  };
  fs.writeFileSync(file('api.json'), JSON.stringify(out, null, 1));
}
main().catch((e) => {
  console.error(`error: ${e.stack}`);
  process.exit(1);
});
