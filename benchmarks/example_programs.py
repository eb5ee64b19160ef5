"""PyTorch's own examples (a checkout of the pytorch/examples repository) as mutation-corpus programs.

Nothing of the examples is kept here: each script is read from the checkout when the corpus runs
and split into cells as a notebook user splits it (``programs.script_cells``); its local modules
(``model.py``, ``data.py``) stay module files next to the notebook. This file holds only how to run
each one at a tiny size on the simulated device without downloading anything:

* the command line it gets (small sizes, one epoch, the accelerator on);
* synthetic data in place of a download: text files for the word language model, a small
  citation graph in the Cora format for the graph attention network, and a stand-in
  ``torchvision`` package (installed into a ``site-packages`` folder of the notebook's, so that
  it is library code as the real one is) whose MNIST and FakeData give random images.

Examples left out, and why: LSTM/GRU/LSTMCell models (mnist_rnn, time_sequence_prediction; the
simulated device has no fused recurrent cells), gcn (sparse tensors; the simulated device holds
dense tensors only), reinforcement_learning and regression (no device placement to delete),
imagenet, siamese_network, fast_neural_style and super_resolution (torchvision's models or image
folders),
language_translation (spaCy and torchtext), distributed, mnist_hogwild (processes).
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from programs import Program, script_cells

#: The stand-in torchvision: datasets of random images, the transforms the examples use, no-op saving.
TORCHVISION = {
    "__init__.py": "from . import datasets, transforms, utils\n",
    "datasets.py": '''
import torch
from torch.utils.data import Dataset


class _Images(Dataset):
    def __init__(self, count, shape, classes, transform=None, target_transform=None, seed=0):
        generator = torch.Generator().manual_seed(seed)
        self.data = (torch.rand(count, *shape, generator=generator) * 255).to(torch.uint8)
        self.targets = torch.randint(0, classes, (count,), generator=generator)
        self.transform, self.target_transform = transform, target_transform

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        image = self.data[index]
        image = image.unsqueeze(0) if image.dim() == 2 else image
        image = self.transform(image) if self.transform is not None else image
        target = int(self.targets[index])
        return image, self.target_transform(target) if self.target_transform is not None else target


class MNIST(_Images):
    def __init__(self, root, train=True, transform=None, target_transform=None, download=False):
        super().__init__(64 if train else 32, (28, 28), 10, transform, target_transform, seed=0 if train else 1)


class FakeData(_Images):
    def __init__(self, size=1000, image_size=(3, 224, 224), num_classes=10, transform=None, target_transform=None,
                 random_offset=0):
        super().__init__(min(size, 16), tuple(image_size), num_classes, transform, target_transform, random_offset)
''',
    "transforms.py": '''
import torch


class Compose:
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, x):
        for t in self.transforms:
            x = t(x)
        return x


class ToTensor:
    def __call__(self, x):
        return x.float() / 255 if x.dtype == torch.uint8 else x


class Normalize:
    def __init__(self, mean, std):
        self.mean, self.std = mean, std

    def __call__(self, x):
        mean = torch.tensor(self.mean).view(-1, 1, 1)
        std = torch.tensor(self.std).view(-1, 1, 1)
        return (x - mean) / std


class Lambda:
    def __init__(self, f):
        self.f = f

    def __call__(self, x):
        return self.f(x)


class Resize:
    def __init__(self, size):
        self.size = size

    def __call__(self, x):
        size = (self.size, self.size) if isinstance(self.size, int) else tuple(self.size)
        if tuple(x.shape[-2:]) == size:
            return x
        return torch.nn.functional.interpolate(x.unsqueeze(0).float(), size=size).squeeze(0)


class CenterCrop(Resize):
    pass
''',
    "utils.py": '''
def save_image(tensor, fp, *args, **kwargs):
    open(fp, "wb").close()


def make_grid(tensor, *args, **kwargs):
    return tensor
''',
}

#: The harness's first cell: the stand-in packages are importable (no name is bound).
PREPARE = "__import__('sys').path.insert(0, __import__('os').path.abspath('site-packages'))"


def _stand_ins() -> tuple[tuple[str, str], ...]:
    return tuple((f"site-packages/torchvision/{name}", text) for name, text in TORCHVISION.items())


def _words(seed: int, lines: int) -> str:
    rng = random.Random(seed)
    vocabulary = [f"w{i}" for i in range(40)]
    return "\n".join(" ".join(rng.choice(vocabulary) for _ in range(rng.randint(4, 10))) for _ in range(lines)) + "\n"


def _cora(nodes: int = 1700, features: int = 16, classes: int = 7, edges: int = 3000) -> tuple[tuple[str, str], ...]:
    rng = random.Random(0)
    ids = rng.sample(range(10_000, 99_999), nodes)
    content = "\n".join(f"{i}\t" + "\t".join(str(rng.randint(0, 1)) for _ in range(features)) + f"\tclass{rng.randrange(classes)}"
                        for i in ids)
    cites = "\n".join(f"{rng.choice(ids)}\t{rng.choice(ids)}" for _ in range(edges))
    return (("cora/cora.content", content + "\n"), ("cora/cora.cites", cites + "\n"))


def _read(root: Path, relative: str) -> str:
    return (root / relative).read_text()


def example_programs(root: str | Path) -> list[Program]:
    """The examples this checkout has, each ready to run on the simulated device."""
    root = Path(root)
    out: list[Program] = []

    def add(name: str, script: str, argv: list[str], modules: tuple[str, ...] = (), data: tuple = (),
            more: tuple[tuple[str, list[str]], ...] = ()) -> None:
        if not (root / script).is_file():
            return
        cells = script_cells(_read(root, script), argv)
        for other, other_argv in more:
            cells += script_cells(_read(root, other), other_argv)
        files = tuple((Path(m).name, _read(root, m)) for m in modules)
        out.append(Program(name, "pytorch/examples", tuple(cells), files=files, prepare=PREPARE,
                           data=_stand_ins() + tuple(data)))

    text = (("data/train.txt", _words(0, 120)), ("data/valid.txt", _words(1, 30)), ("data/test.txt", _words(2, 30)))
    small = ["--data", "./data", "--emsize", "16", "--nhid", "16", "--nlayers", "1", "--epochs", "1", "--bptt", "5",
             "--batch_size", "4", "--accel", "--dry-run"]
    # (generate.py loads the checkpoint with map_location=device: a storage cannot be put on the
    # simulated device, so it runs on a GPU only.)
    add("word_language_model_rnn", "word_language_model/main.py", small + ["--model", "RNN_TANH"],
        ("word_language_model/model.py", "word_language_model/data.py"), text)
    add("word_language_model_transformer", "word_language_model/main.py", small + ["--model", "Transformer"],
        ("word_language_model/model.py", "word_language_model/data.py"), text)
    add("dcgan", "dcgan/main.py", ["--dataset", "fake", "--batchSize", "4", "--imageSize", "64", "--ngf", "8",
                                   "--ndf", "8", "--niter", "1", "--workers", "0", "--accel", "--dry-run",
                                   "--outf", "out"], data=(("out/.keep", ""),))
    add("vae", "vae/main.py", ["--batch-size", "16", "--epochs", "1"], data=(("results/.keep", ""),))
    add("mnist", "mnist/main.py", ["--batch-size", "16", "--test-batch-size", "16", "--epochs", "1", "--dry-run"])
    add("mnist_forward_forward", "mnist_forward_forward/main.py", ["--epochs", "2", "--train_size", "32",
                                                                   "--test_size", "16"])
    add("gat", "gat/main.py", ["--epochs", "2", "--hidden-dim", "8", "--num-heads", "2", "--dry-run"], data=_cora())
    return out
