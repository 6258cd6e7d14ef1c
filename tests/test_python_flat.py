"""FLAT's compile.py (examples/fl-fedavg/models/{mnist,cifar10}) with its import line swapped to otter_onnx makes
training artifacts that `otter train` trains. The seeds (000) show the MNIST DNN class and describe the rest:
export with PyTorch, generate_artifacts (CrossEntropyLoss, AdamW, the logits as an additional output, as
Microsoft's on_device_training/web/offline-step sample that FLAT customizes), and shapes.json with the parameter
shapes. The scripts below are that, run unchanged but for `from otter_onnx.training import artifacts`.
Skips (77) only when torch, numpy or onnx is absent."""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import testlib as tl  # noqa: E402

try:
    import numpy as np
    import onnx  # noqa: F401
    import torch  # noqa: F401
except ImportError as e:
    print(f"SKIP: {e}")
    sys.exit(77)

COMMON_TAIL = '''
parser = argparse.ArgumentParser()
parser.add_argument("--output", default="artifacts")
args = parser.parse_args()

model = {model}
requires_grad = [name for name, param in model.named_parameters() if param.requires_grad]
frozen_params = [name for name, param in model.named_parameters() if not param.requires_grad]

model_input = torch.randn({input_shape})
f = io.BytesIO()
torch.onnx.export(model, model_input, f, input_names=["input"], output_names=["output"], opset_version=14,
                  do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING,
                  dynamic_axes={{"input": {{0: "batch_size"}}, "output": {{0: "batch_size"}}}}, export_params=True,
                  keep_initializers_as_inputs=False)
onnx_model = onnx.load_model_from_string(f.getvalue())

artifacts.generate_artifacts(
    onnx_model,
    optimizer=artifacts.OptimType.AdamW,
    loss=artifacts.LossType.CrossEntropyLoss,
    requires_grad=requires_grad,
    frozen_params=frozen_params,
    artifact_directory=args.output,
    additional_output_names=["output"])

shapes = [{{"name": name, "shape": list(param.shape)}} for name, param in model.named_parameters()]
with open(os.path.join(args.output, "shapes.json"), "w") as fp:
    json.dump(shapes, fp)
'''

HEAD = '''from otter_onnx.training import artifacts
import torch
import onnx
import io
import os
import json
import argparse
'''

MNIST = HEAD + '''
# Pytorch class that we will use to generate the graphs.
class DNN(torch.nn.Module):
    def __init__(self, input_size, hidden_size, num_classes):
        super(DNN, self).__init__()
        self.fc1 = torch.nn.Linear(input_size, hidden_size)
        self.relu = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(hidden_size, hidden_size)
        self.relu2 = torch.nn.ReLU()
        self.fc3 = torch.nn.Linear(hidden_size, num_classes)

    def forward(self, model_input):
        out = self.fc1(model_input)
        out = self.relu(out)
        out = self.fc2(out)
        out = self.relu2(out)
        out = self.fc3(out)
        return out
''' + COMMON_TAIL.format(model="DNN(784, 200, 10)", input_shape="1, 784")

CIFAR = HEAD + '''
# Pytorch class that we will use to generate the graphs.
class CNN(torch.nn.Module):
    def __init__(self, num_classes):
        super(CNN, self).__init__()
        self.conv1 = torch.nn.Conv2d(3, 32, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(32, 64, 3, padding=1)
        self.conv3 = torch.nn.Conv2d(64, 128, 3, padding=1)
        self.pool = torch.nn.MaxPool2d(2, 2)
        self.relu = torch.nn.ReLU()
        self.fc1 = torch.nn.Linear(128 * 4 * 4, 512)
        self.fc2 = torch.nn.Linear(512, num_classes)

    def forward(self, model_input):
        out = self.pool(self.relu(self.conv1(model_input)))
        out = self.pool(self.relu(self.conv2(out)))
        out = self.pool(self.relu(self.conv3(out)))
        out = torch.flatten(out, 1)
        out = self.relu(self.fc1(out))
        out = self.fc2(out)
        return out
''' + COMMON_TAIL.format(model="CNN(10)", input_shape="1, 3, 32, 32")


def main():
    work = tl.work_dir("test_python_flat")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ, PYTHONPATH=os.path.join(tl.SRC, "python"))
    rng = np.random.default_rng(1)
    for name, script, sample, n_params in [("mnist", MNIST, (784,), 6), ("cifar10", CIFAR, (3, 32, 32), 10)]:
        folder = os.path.join(work, name)
        os.makedirs(folder)
        path = os.path.join(folder, "compile.py")
        open(path, "w").write(script)
        r = subprocess.run([sys.executable, path, "--output", os.path.join(folder, "artifacts")], cwd=folder,
                           env=env, capture_output=True, text=True)
        print(r.stdout + r.stderr, end="")
        tl.check(r.returncode == 0, f"{name}/compile.py with otter_onnx")
        art = os.path.join(folder, "artifacts")
        made = sorted(os.listdir(art)) if os.path.isdir(art) else []
        tl.check(all(f in made for f in ["training_model.onnx", "eval_model.onnx", "optimizer_model.onnx",
                                         "checkpoint", "shapes.json"]), f"{name}: {made}")
        if not made:
            continue
        shapes = json.load(open(os.path.join(art, "shapes.json")))
        tl.check(len(shapes) == n_params, f"{name}: shapes.json lists {len(shapes)} parameters")
        x = rng.random((32, *sample), dtype=np.float32)
        y = rng.integers(0, 10, 32).astype(np.int64)
        np.save(os.path.join(folder, "x.npy"), x)
        np.save(os.path.join(folder, "y.npy"), y)
        r = tl.otter("train", art, "--data", f"npy:{folder}/x.npy,{folder}/y.npy", "--batch-size", "8",
                     "--epochs", "2", "--normalize", "none")
        tl.check(r.returncode == 0, f"{name}: otter train trains the artifacts")
        losses = [float(line.split()[1]) for line in r.stdout.splitlines() if line.strip()[:1].isdigit()]
        tl.check(len(losses) == 2 and all(np.isfinite(losses)) and losses[1] < losses[0],
                 f"{name}: epoch losses {losses} fall")
    return tl.finish("test_python_flat")


if __name__ == "__main__":
    sys.exit(main())
