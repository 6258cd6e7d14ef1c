// otter-onnx: the JavaScript API over otter's WebAssembly module, written once. web/build-entries.js wraps this
// file with the emscripten loader into dist/otter.cjs (Node, require) and dist/otter.mjs (browsers, import);
// each entry hands createOtterApi its platform: how to instantiate the module and how to read a path or URL.
//
// The training API mirrors onnxruntime-web 1.19.2's TrainingSession (onnxruntime-common's training-session.d.ts),
// so a script written for `ort.TrainingSession` runs with only its import changed. Every call goes to the C
// library (src/web/otter_web.c and the public API it exports); a failure rejects the promise with an Error whose
// message is otter_last_error(), which names the tensor, node or file at fault. Results are copied out of wasm
// memory (a later call may grow and move it) and every C allocation is freed before the call returns.

/* exported createOtterApi */
function createOtterApi(platform) {
  'use strict';

  // ONNX element types (TensorProto.DataType, otter_dtype) by onnxruntime-web's tensor type names.
  const DTYPES = {
    float32: [1, Float32Array], uint8: [2, Uint8Array], int8: [3, Int8Array], uint16: [4, Uint16Array],
    int16: [5, Int16Array], int32: [6, Int32Array], int64: [7, BigInt64Array], bool: [9, Uint8Array],
    float16: [10, Uint16Array], float64: [11, Float64Array], uint32: [12, Uint32Array], uint64: [13, BigUint64Array],
  };
  const TYPE_OF_DTYPE = {};
  for (const [name, [code]] of Object.entries(DTYPES)) TYPE_OF_DTYPE[code] = name;
  const TYPE_OF_ARRAY = new Map([
    [Float32Array, 'float32'], [Uint8Array, 'uint8'], [Int8Array, 'int8'], [Uint16Array, 'uint16'],
    [Int16Array, 'int16'], [Int32Array, 'int32'], [BigInt64Array, 'int64'], [Float64Array, 'float64'],
    [Uint32Array, 'uint32'], [BigUint64Array, 'uint64'],
  ]);

  // onnxruntime-web's env; the module is single-threaded, so numThreads is accepted and has no effect.
  const env = { wasm: { numThreads: 1, simd: true, proxy: false }, logLevel: 'warning', debug: false };

  let modulePromise = null;
  function wasmModule() {
    if (!modulePromise) modulePromise = platform.instantiate();
    return modulePromise;
  }

  class Tensor {
    // new Tensor(type, data, dims) or new Tensor(typedArray, dims), as onnxruntime-common's Tensor.
    constructor(arg0, arg1, arg2) {
      let type, data, dims;
      if (typeof arg0 === 'string') {
        type = arg0;
        data = arg1;
        dims = arg2;
        if (!DTYPES[type]) throw new TypeError(`Tensor: unsupported type '${type}' (${Object.keys(DTYPES).join(', ')})`);
        const Ctor = DTYPES[type][1];
        if (Array.isArray(data)) {
          data = type === 'int64' || type === 'uint64' ? Ctor.from(data, (v) => BigInt(v)) : Ctor.from(data, Number);
        } else if (!(data instanceof Ctor)) {
          throw new TypeError(`Tensor: a '${type}' tensor takes a ${Ctor.name} or an array`);
        }
      } else {
        data = arg0;
        dims = arg1;
        type = TYPE_OF_ARRAY.get(data && data.constructor);
        if (!type) throw new TypeError('Tensor: data must be a typed array when no type is given');
      }
      if (dims === undefined) dims = [data.length];
      if (!Array.isArray(dims) || !dims.every((d) => Number.isSafeInteger(d) && d >= 0)) {
        throw new TypeError('Tensor: dims must be an array of non-negative integers');
      }
      const size = dims.reduce((a, b) => a * b, 1);
      if (size !== data.length) {
        throw new RangeError(`Tensor: dims [${dims}] hold ${size} elements, the data has ${data.length}`);
      }
      this.type = type;
      this.data = data;
      this.dims = dims;
      this.size = size;
      this.location = 'cpu';
    }
    dispose() {}
  }

  // Temporary wasm allocations of one call, freed together.
  class Scratch {
    constructor(M) {
      this.M = M;
      this.ptrs = [];
      this.tensors = [];
    }
    alloc(nbytes) {
      const p = this.M._malloc(Math.max(nbytes, 1));
      if (!p) throw new Error(`out of wasm memory allocating ${nbytes} bytes`);
      this.ptrs.push(p);
      return p;
    }
    bytes(u8) {
      const p = this.alloc(u8.byteLength);
      this.M.HEAPU8.set(u8, p);
      return p;
    }
    string(s) {
      const n = this.M.lengthBytesUTF8(s) + 1;
      const p = this.alloc(n);
      this.M.stringToUTF8(s, p, n);
      return p;
    }
    pointers(list) {
      const p = this.alloc(4 * list.length);
      this.M.HEAPU32.set(list, p >> 2);
      return p;
    }
    strings(list) {
      return this.pointers(list.map((s) => this.string(s)));
    }
    // A C tensor holding a copy of an onnxruntime-style tensor (anything with type, data and dims).
    tensor(what, value) {
      if (!value || typeof value !== 'object' || typeof value.type !== 'string' || !value.data || !value.dims) {
        throw new TypeError(`${what}: expected a Tensor`);
      }
      const dt = DTYPES[value.type];
      if (!dt) throw new TypeError(`${what}: tensor type '${value.type}' is not supported by otter-onnx`);
      const data = value.data;
      if (!ArrayBuffer.isView(data) || data.length !== value.dims.reduce((a, b) => a * b, 1)) {
        throw new RangeError(`${what}: the data does not match dims [${value.dims}]`);
      }
      const dims = this.alloc(8 * Math.max(value.dims.length, 1));
      this.M.HEAPF64.set(value.dims, dims >> 3);
      const bytes = this.bytes(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
      const t = this.M._otter_web_tensor_new(dt[0], value.dims.length, dims, bytes);
      if (!t) throw new Error(`${what}: ${lastError(this.M)}`);
      this.tensors.push(t);
      return t;
    }
    free() {
      for (const t of this.tensors) this.M._otter_tensor_free(t);
      for (const p of this.ptrs) this.M._free(p);
      this.ptrs = [];
      this.tensors = [];
    }
  }

  function lastError(M) {
    return M.UTF8ToString(M._otter_last_error());
  }
  function check(M, status) {
    if (status !== 0) throw new Error(lastError(M));
  }
  async function withScratch(M, fn) {
    const scratch = new Scratch(M);
    try {
      return fn(scratch);
    } finally {
      scratch.free();
    }
  }

  // Copy a C tensor into a Tensor and free it.
  function takeTensor(M, t) {
    try {
      const type = TYPE_OF_DTYPE[M._otter_web_tensor_dtype(t)];
      if (!type) throw new Error(`output of element type ${M._otter_web_tensor_dtype(t)} is not supported by otter-onnx`);
      const dims = [];
      for (let i = 0; i < M._otter_web_tensor_rank(t); i++) dims.push(M._otter_web_tensor_dim(t, i));
      const ptr = M._otter_web_tensor_data(t);
      const Ctor = DTYPES[type][1];
      const data = new Ctor(M.HEAPU8.slice(ptr, ptr + M._otter_tensor_nbytes(t)).buffer);
      return new Tensor(type, data, dims);
    } finally {
      M._otter_tensor_free(t);
    }
  }

  // The C tensors in the array at ptr (one per name, NULL where none) as {name: Tensor}; every one is freed.
  function takeOutputs(M, ptr, outputNames) {
    const tensors = Array.from(M.HEAPU32.subarray(ptr >> 2, (ptr >> 2) + outputNames.length));
    const result = {};
    let error = null;
    tensors.forEach((t, i) => {
      if (!t) return;
      try {
        result[outputNames[i]] = takeTensor(M, t);
      } catch (e) {
        error = error || e;
      }
    });
    if (error) throw error;
    return result;
  }

  // Bytes the C library allocated (size at sizePtr), copied out and freed; a NULL result is the error.
  function takeBytes(M, ptr, sizePtr) {
    if (!ptr) throw new Error(lastError(M));
    const out = M.HEAPU8.slice(ptr, ptr + M.HEAPU32[sizePtr >> 2]);
    M._otter_free(ptr);
    return out;
  }

  async function readSource(what, src) {
    if (src instanceof Uint8Array) return src;
    if (src instanceof ArrayBuffer) return new Uint8Array(src);
    if (ArrayBuffer.isView(src)) return new Uint8Array(src.buffer, src.byteOffset, src.byteLength);
    if (typeof src === 'string') {
      try {
        return await platform.read(src);
      } catch (e) {
        throw new Error(`${what}: cannot read '${src}': ${e.message}`);
      }
    }
    throw new TypeError(`${what}: expected a path, a URL or a Uint8Array`);
  }

  function names(M, count, nameAt) {
    const out = [];
    for (let i = 0; i < count; i++) out.push(M.UTF8ToString(nameAt(i)));
    return out;
  }

  // onnxruntime-common's argument handling of run steps: (feeds[, fetches][, options]); fetches is a list of output
  // names or an object keyed by them. Returns the output names to fetch, in the graph's output order.
  function fetchList(inputNames, outputNames, feeds, arg1) {
    if (typeof feeds !== 'object' || feeds === null || feeds instanceof Tensor || Array.isArray(feeds)) {
      throw new TypeError("'feeds' must be an object that use input names as keys and OnnxValue as corresponding values.");
    }
    let wanted = null;
    if (Array.isArray(arg1)) {
      if (arg1.length === 0) throw new TypeError("'fetches' cannot be an empty array.");
      for (const name of arg1) {
        if (outputNames.indexOf(name) === -1) throw new RangeError(`'fetches' contains invalid output name: ${name}.`);
      }
      wanted = arg1;
    } else if (typeof arg1 === 'object' && arg1 !== null) {
      const keys = outputNames.filter((n) => Object.prototype.hasOwnProperty.call(arg1, n));
      if (keys.length) wanted = keys;
    } else if (arg1 !== undefined) {
      throw new TypeError("Unexpected argument[1]: must be 'fetches' or 'options'.");
    }
    for (const name of inputNames) {
      if (typeof feeds[name] === 'undefined') throw new Error(`input '${name}' is missing in 'feeds'.`);
    }
    return outputNames.filter((n) => !wanted || wanted.indexOf(n) !== -1);
  }

  // One train or eval step: every feed by name, the first k user outputs (k: up to the last one fetched).
  function runStep(M, stepFn, handle, outputNames, feeds, fetched) {
    return withScratch(M, (sc) => {
      const inNames = Object.keys(feeds);
      const inputs = inNames.map((n) => sc.tensor(`input '${n}'`, feeds[n]));
      const k = Math.max(...fetched.map((n) => outputNames.indexOf(n))) + 1;
      const outs = sc.pointers(new Array(k).fill(0));
      const st = stepFn(handle, inNames.length, sc.strings(inNames), sc.pointers(inputs), k, outs);
      const result = takeOutputs(M, outs, outputNames.slice(0, k));
      if (st !== 0) throw new Error(lastError(M));
      for (const name of outputNames) {
        if (fetched.indexOf(name) === -1) delete result[name];
      }
      return result;
    });
  }

  const LR_SCHEDULES = { constant: 0, linear: 1, cosine: 2, step: 3 };

  class TrainingSession {
    constructor(M, handle) {
      this._M = M;
      this._h = handle;
      this.hasEvalModel = !!M._otter_training_has_eval(handle);
      this.hasOptimizerModel = !!M._otter_training_has_optimizer(handle);
      const graphNames = (g) => ({
        inputs: names(M, M._otter_training_input_count(handle, g), (i) => M._otter_training_input_name(handle, g, i)),
        outputs: names(M, M._otter_training_output_count(handle, g), (i) => M._otter_training_output_name(handle, g, i)),
      });
      const train = graphNames(0);
      const evalNames = this.hasEvalModel ? graphNames(1) : { inputs: [], outputs: [] };
      this.trainingInputNames = train.inputs;
      this.trainingOutputNames = train.outputs;
      this.evalInputNames = evalNames.inputs;
      this.evalOutputNames = evalNames.outputs;
    }

    // create({checkpointState, trainModel, evalModel?, optimizerModel?}, sessionOptions?): each a path (Node), a URL
    // (fetched) or bytes.
    static async create(trainingOptions, sessionOptions) {
      if (!trainingOptions || !trainingOptions.checkpointState || !trainingOptions.trainModel) {
        throw new TypeError('TrainingSession.create: checkpointState and trainModel are required');
      }
      const parts = ['checkpointState', 'trainModel', 'evalModel', 'optimizerModel'];
      const bytes = await Promise.all(
        parts.map((p) => (trainingOptions[p] ? readSource(`TrainingSession.create: ${p}`, trainingOptions[p]) : null)));
      const M = await wasmModule();
      return withScratch(M, (sc) => {
        const args = [];
        for (const b of bytes) args.push(b ? sc.bytes(b) : 0, b ? b.byteLength : 0);
        const h = M._otter_web_training_create(...args);
        if (!h) throw new Error(lastError(M));
        return new TrainingSession(M, h);
      });
    }

    _handle() {
      if (!this._h) throw new Error('this TrainingSession was released');
      return this._h;
    }

    async lazyResetGrad() {
      check(this._M, this._M._otter_training_lazy_reset_grad(this._handle()));
    }

    async runTrainStep(feeds, fetches, options) {
      const h = this._handle();
      const fetched = fetchList(this.trainingInputNames, this.trainingOutputNames, feeds, fetches);
      return runStep(this._M, this._M._otter_training_train_step, h, this.trainingOutputNames, feeds, fetched);
    }

    async runOptimizerStep(options) {
      const h = this._handle();
      if (!this.hasOptimizerModel) throw new Error('This TrainingSession has no OptimizerModel loaded.');
      check(this._M, this._M._otter_training_optimizer_step(h));
    }

    async runEvalStep(feeds, fetches, options) {
      const h = this._handle();
      if (!this.hasEvalModel) throw new Error('This TrainingSession has no EvalModel loaded.');
      const fetched = fetchList(this.evalInputNames, this.evalOutputNames, feeds, fetches);
      return runStep(this._M, this._M._otter_training_eval_step, h, this.evalOutputNames, feeds, fetched);
    }

    async getParametersSize(trainableOnly = true) {
      return this._M._otter_training_params_size(this._handle(), trainableOnly ? 1 : 0);
    }

    // A float32 Tensor of every parameter (trainable ones only unless trainableOnly is false), in the training
    // graph's parameter order: onnxruntime-web's layout, which FLAT's shapes.json reshapes.
    async getContiguousParameters(trainableOnly = true) {
      const M = this._M;
      const h = this._handle();
      const n = M._otter_training_params_size(h, trainableOnly ? 1 : 0);
      return withScratch(M, (sc) => {
        const buf = sc.alloc(4 * n);
        check(M, M._otter_training_copy_params_to_buffer(h, buf, n, trainableOnly ? 1 : 0));
        return new Tensor('float32', new Float32Array(M.HEAPU8.slice(buf, buf + 4 * n).buffer), [n]);
      });
    }

    // buffer: the float32 parameters' bytes, as onnxruntime-web takes them.
    async loadParametersBuffer(buffer, trainableOnly = true) {
      const M = this._M;
      const h = this._handle();
      const n = M._otter_training_params_size(h, trainableOnly ? 1 : 0);
      if (!(buffer instanceof Uint8Array) || buffer.length !== 4 * n) {
        throw new Error('Size of the buffer passed into loadParametersBuffer must match the number of parameters in ' +
                        `the model (${n} float32 values, ${4 * n} bytes). Please use getParametersSize method to check.`);
      }
      return withScratch(M, (sc) => {
        check(M, M._otter_training_copy_buffer_to_params(h, sc.bytes(buffer), n, trainableOnly ? 1 : 0));
      });
    }

    async getLearningRate() {
      return this._M._otter_training_get_lr(this._handle());
    }

    async setLearningRate(lr) {
      check(this._M, this._M._otter_training_set_lr(this._handle(), lr));
    }

    // The C API's otter_lr_schedule: {type: 'constant' | 'linear' | 'cosine' | 'step', initialLR, warmupSteps,
    // totalSteps, minLR (cosine), stepSize and gamma (step)}. The rate becomes the schedule's value at the current
    // optimizer step; call schedulerStep() after each runOptimizerStep() to follow it.
    async setLearningRateSchedule(schedule) {
      const kind = LR_SCHEDULES[schedule && schedule.type];
      if (kind === undefined) {
        throw new TypeError(`setLearningRateSchedule: type must be one of ${Object.keys(LR_SCHEDULES).join(', ')}`);
      }
      const s = schedule;
      check(this._M, this._M._otter_web_training_set_schedule(this._handle(), kind, s.initialLR ?? 0.001,
        s.warmupSteps ?? 0, s.totalSteps ?? 0, s.minLR ?? 0, s.stepSize ?? 0, s.gamma ?? 0));
    }

    async schedulerStep() {
      check(this._M, this._M._otter_training_scheduler_step(this._handle()));
    }

    // Optimizer updates done so far (the checkpoint's step).
    async getStepCount() {
      return this._M._otter_web_training_step_count(this._handle());
    }

    // The state as checkpoint bytes (ONNX Runtime's format), loadable by TrainingSession.create and `otter train`.
    async saveCheckpoint(includeOptimizerState = true) {
      const M = this._M;
      const h = this._handle();
      return withScratch(M, (sc) => {
        const size = sc.alloc(4);
        return takeBytes(M, M._otter_web_training_save_checkpoint(h, includeOptimizerState ? 1 : 0, size), size);
      });
    }

    // onnxruntime's ExportModelForInferencing: the eval model with the named outputs (default: every eval output
    // but the loss) and the current parameters as initializers, as ONNX bytes.
    async exportModelForInferencing(outputNames = []) {
      const M = this._M;
      const h = this._handle();
      return withScratch(M, (sc) => {
        const size = sc.alloc(4);
        const list = outputNames.length ? sc.strings(outputNames) : 0;
        return takeBytes(M, M._otter_web_training_export(h, outputNames.length, list, size), size);
      });
    }

    async release() {
      if (this._h) this._M._otter_training_session_free(this._h);
      this._h = 0;
    }
  }

  class InferenceSession {
    constructor(M, handle) {
      this._M = M;
      this._h = handle;
      this.inputNames = names(M, M._otter_session_input_count(handle), (i) => M._otter_session_input_name(handle, i));
      this.outputNames = names(M, M._otter_session_output_count(handle), (i) => M._otter_session_output_name(handle, i));
    }

    static async create(model, options) {
      const bytes = await readSource('InferenceSession.create', model);
      const M = await wasmModule();
      return withScratch(M, (sc) => {
        const h = M._otter_web_session_create(sc.bytes(bytes), bytes.byteLength);
        if (!h) throw new Error(lastError(M));
        return new InferenceSession(M, h);
      });
    }

    async run(feeds, fetches, options) {
      const M = this._M;
      if (!this._h) throw new Error('this InferenceSession was released');
      const wanted = fetchList(this.inputNames, this.outputNames, feeds, fetches);
      return withScratch(M, (sc) => {
        const inNames = Object.keys(feeds);
        const inputs = inNames.map((n) => sc.tensor(`input '${n}'`, feeds[n]));
        const outs = sc.pointers(new Array(wanted.length).fill(0));
        const st = M._otter_session_run(this._h, inNames.length, sc.strings(inNames), sc.pointers(inputs),
          wanted.length, sc.strings(wanted), outs);
        const result = takeOutputs(M, outs, wanted);
        if (st !== 0) throw new Error(lastError(M));
        return result;
      });
    }

    async release() {
      if (this._h) this._M._otter_session_free(this._h);
      this._h = 0;
    }
  }

  // Training artifacts from a forward model, as onnxruntime-training's artifacts.generate_artifacts makes them:
  // options {requiresGrad, frozenParams: initializer names; loss: 'CrossEntropyLoss' | 'MSELoss' |
  // 'BCEWithLogitsLoss' | 'L1Loss' | 'none' (the model's first output is the loss); optimizer: 'AdamW' (default) |
  // 'SGD' | 'none'; additionalOutputNames}. Resolves to {trainModel, evalModel, optimizerModel, checkpointState}
  // (Uint8Arrays; optimizerModel undefined without an optimizer), ready for TrainingSession.create.
  async function generateArtifacts(model, options = {}) {
    const bytes = await readSource('generateArtifacts', model);
    const M = await wasmModule();
    const list = (v, what) => {
      if (v === undefined || v === null) return [];
      if (!Array.isArray(v) || !v.every((s) => typeof s === 'string')) {
        throw new TypeError(`generateArtifacts: ${what} must be an array of names`);
      }
      return v;
    };
    const requiresGrad = list(options.requiresGrad, 'requiresGrad');
    const frozen = list(options.frozenParams, 'frozenParams');
    const extra = list(options.additionalOutputNames, 'additionalOutputNames');
    return withScratch(M, (sc) => {
      const a = M._otter_web_artifacts_build(sc.bytes(bytes), bytes.byteLength,
        requiresGrad.length, requiresGrad.length ? sc.strings(requiresGrad) : 0,
        frozen.length, frozen.length ? sc.strings(frozen) : 0, sc.string(options.loss || 'none'),
        sc.string(options.optimizer || 'AdamW'), extra.length, extra.length ? sc.strings(extra) : 0);
      if (!a) throw new Error(lastError(M));
      try {
        const size = sc.alloc(4);
        const part = (which) => takeBytes(M, M._otter_web_artifacts_bytes(a, which, size), size);
        return {
          trainModel: part(0), evalModel: part(1), optimizerModel: options.optimizer === 'none' ? undefined : part(2),
          checkpointState: part(3),
        };
      } finally {
        M._otter_web_artifacts_free(a);
      }
    });
  }

  return { TrainingSession, InferenceSession, Tensor, env, generateArtifacts };
}
