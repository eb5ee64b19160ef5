"""Other libraries' code as mutation-corpus programs: model zoos, metrics, geometry, diffusion
samplers, graph layers, probabilistic models, ODE solvers, normalising flows, medical
imaging inference.

As with transformers (``tests/programs.py``) and the vision programs, the code is read from the
installed packages when the corpus runs: a library module the user copied next to the notebook to
change it (its imports of the package's other modules kept, its imports of the other copies pointed
at them), or the user's own cells written against the library's API as its documentation shows.
Nothing of the libraries' code is kept here: this file holds only which modules, the tiny sizes
they run at, and the cells that train a step and predict.

What these programs bring that the others lack:

* **errors a library wraps or re-raises** — torchmetrics' ``Metric.update`` re-raises a device
  error in its own words (``raise ... from err``), pyro's trace re-raises errors met in a model
  with the sample sites' shapes added;
* **placements inside conditional branches** — monai's sliding-window inference (``sw_device``
  and ``device``), x-transformers' optional position encodings;
* **values with several uses** — a graph's ``edge_index`` read by a subgraph helper and then by
  the model, a diffusion schedule's ``timesteps`` read by the sampler and the UNet;
* **modules with their own ``_apply``** — torchmetrics' ``Metric`` moves its states itself;
* **models split over two devices** — a rotary-attention model whose second half sits on the
  second device;
* **plain objects holding tables** — diffusers' schedulers and a hand-written sampler keeping
  their coefficients on the host.

Each library needs its package installed (``needs``): a program whose package is missing is left
out with a line saying so.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from programs import Program, absolute_imports

_FIXED = frozenset({0})


def copies(modules: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """The user's copies of ``modules`` (full name -> the copy's module name): relative imports made
    absolute, and an import of another copied module (relative or absolute) pointed at its copy."""
    out = []
    for full, local in modules.items():
        source = absolute_imports(full, modules)
        lines = source.split("\n")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.module in modules:
                line = lines[node.lineno - 1]
                lines[node.lineno - 1] = line.replace(f"from {node.module} import", f"from {modules[node.module]} import", 1)
        out.append((f"{local}.py", "\n".join(lines)))
    return tuple(out)


def _step(loss: str) -> str:
    return f"loss = {loss}\nloss.backward()\nopt.step()\nopt.zero_grad()"


# -- model zoos: x-transformers, rotary-embedding-torch --------------------------------------------------


def x_transformers_program(name: str, layers: str) -> Program:
    """x-transformers' decoder from the user's copy of its main file, trained a step and sampled."""
    files = copies({"x_transformers.x_transformers": "xt_layers",
                    "x_transformers.autoregressive_wrapper": "xt_wrapper"})
    cells = (
        "import torch\nfrom xt_layers import TransformerWrapper, Decoder\nfrom xt_wrapper import AutoregressiveWrapper\n"
        "device = torch.device('DEVICE')",
        "torch.manual_seed(0)\n"
        f"net = TransformerWrapper(num_tokens=64, max_seq_len=16, attn_layers=Decoder({layers}))\n"
        "model = AutoregressiveWrapper(net).to(device)\nopt = torch.optim.AdamW(model.parameters(), lr=1e-3)",
        "ids = torch.randint(0, 64, (2, 9), device=device)",
        _step("model(ids)"),
        "model.eval()\nprompt = ids[:, :4]\nwith torch.no_grad():\n"
        "    sampled = model.generate(prompt, 4, cache_kv=False)",
    )
    return Program(name, "x-transformers", cells, files=files, needs=("x_transformers",), fixed_cells=_FIXED)


_ROTARY_MODEL = '''class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, dim * 3, bias=False)
        self.out = nn.Linear(dim, dim)
        self.rotary = RotaryEmbedding(dim=dim // heads // 2)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q = self.rotary.rotate_queries_or_keys(q)
        k = self.rotary.rotate_queries_or_keys(k)
        causal = torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1)
        scores = (q @ k.transpose(-1, -2)) / (d // self.heads) ** 0.5
        attn = scores.masked_fill(causal, float("-inf")).softmax(-1)
        return self.out((attn @ v).transpose(1, 2).reshape(b, n, d))


class Half(nn.Module):
    def __init__(self, dim, heads, depth):
        super().__init__()
        self.blocks = nn.ModuleList(Attention(dim, heads) for _ in range(depth))

    def forward(self, x):
        for block in self.blocks:
            x = x + block(x)
        return x


class SplitLM(nn.Module):
    """A language model split by hand over two devices: the embedding and first half on one, the
    second half and the head on the other."""

    def __init__(self, vocab, dim, heads, first, second):
        super().__init__()
        self.first, self.second = first, second
        self.embed = nn.Embedding(vocab, dim).to(first)
        self.lower = Half(dim, heads, 1).to(first)
        self.upper = Half(dim, heads, 1).to(second)
        self.head = nn.Linear(dim, vocab).to(second)

    def forward(self, ids):
        h = self.lower(self.embed(ids))
        return self.head(self.upper(h.to(self.second)))'''


def rotary_program() -> Program:
    """rotary-embedding-torch from the user's copy, in a hand-written attention split over two devices."""
    files = copies({"rotary_embedding_torch.rotary_embedding_torch": "rotary"})
    cells = (
        "import torch\nfrom torch import nn\nfrom rotary import RotaryEmbedding\n"
        "first, second = torch.device('DEVICE'), torch.device('DEVICE_1')",
        _ROTARY_MODEL,
        "torch.manual_seed(0)\nmodel = SplitLM(64, 16, 2, first, second)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=1e-2)",
        "ids = torch.randint(0, 64, (2, 8), device=first)\ntargets = torch.roll(ids, -1, 1).to(second)",
        _step("nn.functional.cross_entropy(model(ids).flatten(0, 1), targets.flatten())"),
    )
    return Program("rotary_split", "rotary-embedding-torch", cells, files=files, needs=("rotary_embedding_torch",),
                   fixed_cells=_FIXED, devices=frozenset({"cpu", "DEVICE", "DEVICE_1"}))


# -- geometry: kornia, roma ------------------------------------------------------------------------------------

_POSE_MODEL = '''class PoseHead(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(n, 32), nn.ReLU(), nn.Linear(32, 3))

    def forward(self, features):
        return self.net(features)'''


def kornia_geometry_program() -> Program:
    """kornia's rotation and pixel-coordinate conversions from the user's copy, in a pose regression."""
    files = copies({"kornia.geometry.conversions": "conversions"})
    cells = (
        "import torch\nfrom torch import nn\nimport conversions as K\ndevice = torch.device('DEVICE')",
        _POSE_MODEL,
        "torch.manual_seed(0)\nmodel = PoseHead(8).to(device)\nopt = torch.optim.Adam(model.parameters(), lr=1e-3)",
        "features = torch.randn(4, 8, device=device)\ntrue_axis_angle = torch.randn(4, 3, device=device) * 0.5\n"
        "true_rotation = K.axis_angle_to_rotation_matrix(true_axis_angle)\n"
        "pixels = torch.rand(4, 6, 2, device=device) * 31",
        "rotation = K.axis_angle_to_rotation_matrix(model(features))\n"
        "quaternion = K.rotation_matrix_to_quaternion(rotation)\n"
        "back = K.quaternion_to_axis_angle(quaternion)\n"
        "grid = K.normalize_pixel_coordinates(pixels, 32, 32)\n"
        "homogeneous = K.convert_points_to_homogeneous(grid)\n"
        "projected = K.convert_points_from_homogeneous(homogeneous @ rotation.transpose(-1, -2))\n"
        "loss = (rotation - true_rotation).pow(2).mean() + projected.abs().mean() * 1e-3\n"
        "loss.backward()\nopt.step()\nopt.zero_grad()",
        "with torch.no_grad():\n"
        "    euler = K.euler_from_quaternion(*K.normalize_quaternion(quaternion).unbind(-1))\n"
        "    again = K.quaternion_from_euler(*euler)\n"
        "    pixels_back = K.denormalize_pixel_coordinates(grid, 32, 32)",
    )
    return Program("kornia_conversions", "kornia", cells, files=files, needs=("kornia",), fixed_cells=_FIXED)


def kornia_keypoints_program() -> Program:
    """kornia's soft-argmax keypoint layers from the user's copy, on a heatmap network."""
    files = copies({"kornia.geometry.subpix.spatial_soft_argmax": "soft_argmax"})
    cells = (
        "import torch\nfrom torch import nn\nfrom soft_argmax import SpatialSoftArgmax2d, ConvSoftArgmax2d, "
        "conv_soft_argmax2d, spatial_soft_argmax2d\ndevice = torch.device('DEVICE')",
        "torch.manual_seed(0)\nheatmaps = nn.Conv2d(3, 4, 3, padding=1).to(device)\n"
        "argmax = SpatialSoftArgmax2d()\nlocal = ConvSoftArgmax2d((3, 3), (2, 2), (1, 1), output_value=True)\n"
        "opt = torch.optim.Adam(heatmaps.parameters(), lr=1e-3)",
        "images = torch.rand(2, 3, 16, 16, device=device)\ntargets = torch.rand(2, 4, 2, device=device) * 2 - 1",
        "points = argmax(heatmaps(images))\ncoords, values = local(heatmaps(images))\n"
        "loss = (points - targets).pow(2).mean() + values.mean() * 1e-3\nloss.backward()\nopt.step()\nopt.zero_grad()",
        "with torch.no_grad():\n    peaks = spatial_soft_argmax2d(heatmaps(images), normalized_coordinates=False)\n"
        "    nms = conv_soft_argmax2d(heatmaps(images), (3, 3), (1, 1), (1, 1), output_value=False)",
    )
    return Program("kornia_soft_argmax", "kornia", cells, files=files, needs=("kornia",), fixed_cells=_FIXED)


def roma_program() -> Program:
    """roma's rotation mappings and utilities from the user's copies, fitting a rotation."""
    files = copies({"roma.utils": "roma_utils", "roma.mappings": "roma_mappings"})
    cells = (
        "import torch\nfrom torch import nn\nimport roma_mappings as mappings\nimport roma_utils as utils\n"
        "device = torch.device('DEVICE')",
        "torch.manual_seed(0)\nmodel = nn.Linear(6, 9).to(device)\nopt = torch.optim.Adam(model.parameters(), lr=1e-3)",
        "features = torch.randn(5, 6, device=device)\ntarget = mappings.rotvec_to_rotmat(torch.randn(5, 3, device=device))",
        "rotation = mappings.special_procrustes(model(features).view(5, 3, 3))\n"
        "angle = utils.rotmat_geodesic_distance(rotation, target)\n"
        "quat = mappings.rotmat_to_unitquat(rotation)\n"
        "loss = angle.mean() + (mappings.unitquat_to_rotmat(quat) - rotation).abs().mean()\n"
        "loss.backward()\nopt.step()\nopt.zero_grad()",
        "with torch.no_grad():\n    random = utils.random_rotmat(5, device=device)\n"
        "    between = utils.rotmat_slerp(rotation, random, torch.linspace(0, 1, 3, device=device))\n"
        "    identity = utils.identity_quat(5, device=device)",
    )
    return Program("roma_rotations", "roma", cells, files=files, needs=("roma",), fixed_cells=_FIXED)


# -- metrics: torchmetrics -----------------------------------------------------------------------------------


def torchmetrics_program() -> Program:
    """torchmetrics' precision-recall curve, class and functional code from the user's copies: a
    ``Metric`` moves its states in its own ``_apply`` and re-raises a device error in its own words."""
    files = copies({"torchmetrics.functional.classification.precision_recall_curve": "pr_functional",
                    "torchmetrics.classification.precision_recall_curve": "pr_metric"})
    cells = (
        "import torch\nfrom torch import nn\nfrom pr_metric import MulticlassPrecisionRecallCurve, "
        "BinaryPrecisionRecallCurve\nfrom pr_functional import multiclass_precision_recall_curve\n"
        "device = torch.device('DEVICE')",
        "torch.manual_seed(0)\nmodel = nn.Linear(8, 3).to(device)\n"
        "curve = MulticlassPrecisionRecallCurve(num_classes=3, thresholds=5).to(device)\n"
        "binary = BinaryPrecisionRecallCurve(thresholds=torch.linspace(0, 1, 4, device=device)).to(device)",
        "features = torch.randn(6, 8, device=device)\nlabels = torch.tensor([0, 1, 2, 0, 1, 2], device=device)",
        "with torch.no_grad():\n    probs = model(features).softmax(-1)\ncurve.update(probs, labels)\n"
        "binary.update(probs[:, 1], (labels == 1).long())\nprecision, recall, thresholds = curve.compute()",
        "p, r, t = multiclass_precision_recall_curve(probs, labels, num_classes=3, thresholds=torch.linspace(0, 1, 5, "
        "device=device))\nbp, br, bt = binary.compute()",
    )
    return Program("torchmetrics_pr_curve", "torchmetrics", cells, files=files, needs=("torchmetrics",),
                   fixed_cells=_FIXED)


# -- diffusion samplers: diffusers, a hand-written one -----------------------------------------------------------

_DENOISER = """class Denoiser(nn.Module):
    def __init__(self, steps, width):
        super().__init__()
        self.time = nn.Embedding(steps, width)
        self.inp = nn.Conv2d(1, width, 3, padding=1)
        self.out = nn.Conv2d(width, 1, 3, padding=1)

    def forward(self, x, t):
        h = self.inp(x) + self.time(t.reshape(-1))[:, :, None, None]
        return self.out(torch.relu(h))"""
_MODEL = "denoiser = Denoiser(50, 8).to(device)\nopt = torch.optim.AdamW(denoiser.parameters(), lr=1e-4)"


def diffusers_program(scheduler: str, local: str, cls: str) -> Program:
    """A diffusers scheduler from the user's copy, training a tiny denoiser a step and sampling: the
    scheduler is a plain object keeping its coefficient tables, moved as it uses them."""
    files = copies({f"diffusers.schedulers.{scheduler}": local})
    cells = (
        f"import torch\nfrom torch import nn\nfrom {local} import {cls}\ndevice = torch.device('DEVICE')",
        _DENOISER,
        "torch.manual_seed(0)\n" + _MODEL + f"\nscheduler = {cls}(num_train_timesteps=50)",
        "clean = torch.randn(2, 1, 8, 8, device=device)\nnoise = torch.randn_like(clean)\n"
        "t = torch.randint(0, 50, (2,), device=device)",
        "noisy = scheduler.add_noise(clean, noise, t)\n" + _step("(denoiser(noisy, t) - noise).pow(2).mean()"),
        "scheduler.set_timesteps(4, device=device)\nsample = torch.randn(1, 1, 8, 8, device=device)\n"
        "with torch.no_grad():\n"
        "    for step in scheduler.timesteps:\n        eps = denoiser(sample, step)\n"
        "        sample = scheduler.step(eps, step, sample).prev_sample",
    )
    return Program(f"diffusers_{local}", "diffusers", cells, files=files, needs=("diffusers",), fixed_cells=_FIXED)


_SAMPLER = '''class Sampler:
    """DDPM's forward and reverse steps with the schedule's tables kept on the model's device."""

    def __init__(self, steps, device):
        betas = torch.linspace(1e-4, 0.02, steps)
        alphas = 1.0 - betas
        self.betas = betas.to(device)
        self.alphas = alphas.to(device)
        self.alphas_cumprod = torch.cumprod(alphas, 0).to(device)
        self.steps = steps

    def q_sample(self, x0, t, noise):
        a = self.alphas_cumprod[t].view(-1, 1, 1, 1)
        return a.sqrt() * x0 + (1 - a).sqrt() * noise

    def p_step(self, model, x, t):
        eps = model(x, t)
        a, a_bar = self.alphas[t], self.alphas_cumprod[t]
        mean = (x - (1 - a) / (1 - a_bar).sqrt() * eps) / a.sqrt()
        if t > 0:
            return mean + self.betas[t].sqrt() * torch.randn_like(x)
        return mean'''


def sampler_program() -> Program:
    """A hand-written DDPM sampler (a plain object holding its tables) driving a denoiser."""
    cells = (
        "import torch\nfrom torch import nn\ndevice = torch.device('DEVICE')",
        _SAMPLER,
        _DENOISER,
        "torch.manual_seed(0)\n" + _MODEL + "\nsampler = Sampler(50, device)",
        "clean = torch.randn(2, 1, 8, 8, device=device)\nnoise = torch.randn_like(clean)\n"
        "t = torch.randint(0, 50, (2,), device=device)",
        _step("(denoiser(sampler.q_sample(clean, t, noise), t) - noise).pow(2).mean()"),
        "x = torch.randn(1, 1, 8, 8, device=device)\nwith torch.no_grad():\n    for step in (3, 2, 1, 0):\n"
        "        x = sampler.p_step(denoiser, x, torch.tensor(step, device=device))",
    )
    return Program("ddpm_sampler", "hand-written sampler", cells, fixed_cells=_FIXED)


# -- graph layers: torch_geometric ---------------------------------------------------------------------------------


def geometric_program() -> Program:
    """torch_geometric's subgraph helpers from the user's copy, feeding a GCN: the graph's
    ``edge_index`` is read by the helper and then by the model."""
    files = copies({"torch_geometric.utils._subgraph": "subgraph_utils"})
    cells = (
        "import torch\nfrom torch import nn\nfrom torch_geometric.nn import GCNConv\n"
        "from subgraph_utils import k_hop_subgraph, subgraph\ndevice = torch.device('DEVICE')",
        "class GCN(nn.Module):\n    def __init__(self, n, hidden, classes):\n        super().__init__()\n"
        "        self.conv1 = GCNConv(n, hidden)\n        self.conv2 = GCNConv(hidden, classes)\n\n"
        "    def forward(self, x, edge_index):\n        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)",
        "torch.manual_seed(0)\nmodel = GCN(4, 8, 3).to(device)\nopt = torch.optim.Adam(model.parameters(), lr=1e-2)",
        "x = torch.randn(10, 4, device=device)\n"
        "edge_index = torch.randint(0, 10, (2, 30), device=device)\ny = torch.randint(0, 3, (10,), device=device)\n"
        "keep = torch.arange(0, 10, 2, device=device)",
        "nodes, sub_edges, mapping, _ = k_hop_subgraph(torch.tensor([0, 3], device=device), 2, edge_index, "
        "relabel_nodes=True, num_nodes=10)\n"
        "out = model(x[nodes], sub_edges)\n" + _step("nn.functional.cross_entropy(out, y[nodes])"),
        "even_edges, _ = subgraph(keep, edge_index, relabel_nodes=True, num_nodes=10)\n"
        "with torch.no_grad():\n    predicted = model(x[keep], even_edges).argmax(-1)",
    )
    return Program("pyg_subgraph_gcn", "torch_geometric", cells, files=files, needs=("torch_geometric",),
                   fixed_cells=_FIXED)


# -- probabilistic models: pyro, gpytorch, flows ---------------------------------------------------------------------

_PYRO_MODEL = '''def model(x, y=None):
    w = pyro.sample("w", dist.Normal(torch.zeros(3, device=x.device), torch.ones(3, device=x.device)).to_event(1))
    b = pyro.sample("b", dist.Normal(torch.tensor(0.0, device=x.device), torch.tensor(1.0, device=x.device)))
    with pyro.plate("data", x.shape[0]):
        return pyro.sample("obs", dist.Normal(x @ w + b, 0.5), obs=y)'''


def pyro_program() -> Program:
    """A Bayesian regression in pyro with an automatic guide: pyro's trace re-raises a device
    error with the sample sites' shapes added."""
    cells = (
        "import torch\nimport pyro\nimport pyro.distributions as dist\nfrom pyro.infer import SVI, Trace_ELBO, "
        "Predictive\nfrom pyro.infer.autoguide import AutoNormal\ndevice = torch.device('DEVICE')",
        _PYRO_MODEL,
        "pyro.set_rng_seed(0)\npyro.clear_param_store()\n"
        "x = torch.randn(20, 3, device=device)\ny = x @ torch.tensor([1.0, -2.0, 0.5], device=device) + 0.3",
        "guide = AutoNormal(model)\nsvi = SVI(model, guide, pyro.optim.Adam({'lr': 0.01}), Trace_ELBO())\n"
        "for _ in range(3):\n    loss = svi.step(x, y)",
        "predictive = Predictive(model, guide=guide, num_samples=4)\n"
        "samples = predictive(torch.randn(5, 3, device=device))",
    )
    return Program("pyro_regression", "pyro", cells, needs=("pyro",), fixed_cells=_FIXED)


_GP_MODEL = '''class GP(gpytorch.models.ExactGP):
    def __init__(self, x, y, likelihood):
        super().__init__(x, y, likelihood)
        self.mean = gpytorch.means.ConstantMean()
        self.covar = gpytorch.kernels.ScaleKernel(SpectralMixtureKernel(num_mixtures=2))

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean(x), self.covar(x))'''


def gpytorch_program() -> Program:
    """An exact GP in gpytorch with the spectral-mixture kernel from the user's copy."""
    files = copies({"gpytorch.kernels.spectral_mixture_kernel": "spectral_mixture"})
    cells = (
        "import torch\nimport gpytorch\nfrom spectral_mixture import SpectralMixtureKernel\n"
        "device = torch.device('DEVICE')",
        "torch.manual_seed(0)\ntrain_x = torch.linspace(0, 1, 12, device=device)\n"
        "train_y = torch.sin(train_x * 6) + 0.1 * torch.randn(12, device=device)",
        _GP_MODEL,
        "likelihood = gpytorch.likelihoods.GaussianLikelihood().to(device)\n"
        "model = GP(train_x, train_y, likelihood).to(device)\n"
        "model.covar.base_kernel.initialize_from_data(train_x, train_y)\n"
        "opt = torch.optim.Adam(model.parameters(), lr=0.1)\n"
        "mll = gpytorch.mlls.ExactMarginalLogLikelihood(likelihood, model)",
        "model.train()\nlikelihood.train()\n" + _step("-mll(model(train_x), train_y)"),
        "model.eval()\nlikelihood.eval()\ntest_x = torch.linspace(0, 1, 5, device=device)\n"
        "with torch.no_grad(), gpytorch.settings.fast_pred_var():\n    predicted = likelihood(model(test_x)).mean",
    )
    return Program("gpytorch_spectral", "gpytorch", cells, files=files, needs=("gpytorch",), fixed_cells=_FIXED)


def nflows_program() -> Program:
    """A masked autoregressive flow in nflows with base distributions from the user's copy."""
    files = copies({"nflows.distributions.normal": "flow_normal"})
    cells = (
        "import torch\nfrom nflows.flows import Flow\nfrom nflows.transforms import CompositeTransform, "
        "MaskedAffineAutoregressiveTransform, ReversePermutation\nfrom flow_normal import StandardNormal, "
        "ConditionalDiagonalNormal\ndevice = torch.device('DEVICE')",
        "torch.manual_seed(0)\n"
        "transform = CompositeTransform([MaskedAffineAutoregressiveTransform(features=2, hidden_features=8),\n"
        "                               ReversePermutation(features=2),\n"
        "                               MaskedAffineAutoregressiveTransform(features=2, hidden_features=8)])\n"
        "flow = Flow(transform, StandardNormal(shape=[2])).to(device)\n"
        "opt = torch.optim.Adam(flow.parameters(), lr=1e-3)",
        "data = torch.randn(16, 2, device=device) * torch.tensor([1.0, 0.3], device=device)",
        _step("-flow.log_prob(inputs=data).mean()"),
        "with torch.no_grad():\n    drawn = flow.sample(4)\n"
        "conditional = ConditionalDiagonalNormal(shape=[2], context_encoder=torch.nn.Linear(3, 4)).to(device)\n"
        "context = torch.randn(5, 3, device=device)\nwith torch.no_grad():\n"
        "    density = conditional.log_prob(torch.randn(5, 2, device=device), context)",
    )
    return Program("nflows_maf", "nflows", cells, files=files, needs=("nflows",), fixed_cells=_FIXED)


def zuko_program() -> Program:
    """A neural spline flow in zuko, trained a step and sampled; the mixture from the user's copy."""
    files = copies({"zuko.mixtures": "zuko_mixtures"})
    cells = (
        "import torch\nimport zuko\nfrom zuko_mixtures import GMM\ndevice = torch.device('DEVICE')",
        "torch.manual_seed(0)\nflow = zuko.flows.NSF(features=2, context=3, transforms=2, hidden_features=(16,))"
        ".to(device)\nmixture = GMM(features=2, context=3, components=3, hidden_features=(16,)).to(device)\n"
        "opt = torch.optim.Adam([*flow.parameters(), *mixture.parameters()], lr=1e-3)",
        "x = torch.randn(8, 2, device=device)\ncontext = torch.randn(8, 3, device=device)",
        _step("-flow(context).log_prob(x).mean() - mixture(context).log_prob(x).mean()"),
        "with torch.no_grad():\n    drawn = flow(context[:2]).sample((4,))\n    picked = mixture(context[:2]).sample()",
    )
    return Program("zuko_nsf", "zuko", cells, files=files, needs=("zuko",), fixed_cells=_FIXED)


# -- ODE solvers: torchdiffeq ------------------------------------------------------------------------

_ODE_IMPL = "torchdiffeq._impl"


def torchdiffeq_program() -> Program:
    """A neural ODE solved by the user's copy of torchdiffeq's adaptive Runge-Kutta solvers."""
    parts = {f"{_ODE_IMPL}.{name}": f"ode_{name}" for name in ("odeint", "rk_common", "dopri5", "solvers")}
    files = copies(parts)
    cells = (
        "import torch\nfrom torch import nn\nfrom ode_odeint import odeint\ndevice = torch.device('DEVICE')",
        "class Dynamics(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.net = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 2))\n\n"
        "    def forward(self, t, y):\n        return self.net(y)",
        "torch.manual_seed(0)\nfunc = Dynamics().to(device)\nopt = torch.optim.Adam(func.parameters(), lr=1e-3)",
        "y0 = torch.randn(4, 2, device=device)\nts = torch.linspace(0, 1, 5, device=device)\n"
        "target = torch.randn(5, 4, 2, device=device)",
        _step("(odeint(func, y0, ts, rtol=1e-3, atol=1e-4) - target).pow(2).mean()"),
        "with torch.no_grad():\n    fixed = odeint(func, y0, ts, method='rk4', options=dict(step_size=0.25))\n"
        "    bounded = odeint(func, y0, ts, options=dict(first_step=0.1, max_num_steps=50))",
    )
    return Program("torchdiffeq_node", "torchdiffeq", cells, files=files, needs=("torchdiffeq",), fixed_cells=_FIXED)


# -- medical imaging: monai --------------------------------------------------------------------------------------------


def monai_program() -> Program:
    """monai's UNet trained a step, then sliding-window inference from the user's copy, whose
    placements sit in branches on where the windows and the output go (``sw_device``, ``device``)."""
    files = copies({"monai.inferers.utils": "sliding_window"})
    cells = (
        "import torch\nfrom monai.networks.nets import UNet\nfrom sliding_window import sliding_window_inference\n"
        "device = torch.device('DEVICE')",
        "torch.manual_seed(0)\nmodel = UNet(spatial_dims=2, in_channels=1, out_channels=2, channels=(4, 8), "
        "strides=(2,), num_res_units=0).to(device)\nopt = torch.optim.Adam(model.parameters(), lr=1e-3)",
        "images = torch.rand(2, 1, 16, 16, device=device)\nmasks = (images > 0.5).long().squeeze(1)",
        _step("torch.nn.functional.cross_entropy(model(images), masks)"),
        "model.eval()\nwith torch.no_grad():\n"
        "    whole = sliding_window_inference(images, (8, 8), 2, model, overlap=0.5, mode='gaussian')\n"
        "    on_host = sliding_window_inference(images, (8, 8), 2, model, overlap=0.25, sw_device=device, "
        "device='cpu')",
    )
    return Program("monai_sliding_window", "monai", cells, files=files, needs=("monai",), fixed_cells=_FIXED)


def library_programs() -> list[Program]:
    """Every program whose package is installed (each missing one is printed and left out)."""
    makers = (
        lambda: x_transformers_program("xt_rotary", "dim=16, depth=2, heads=2, rotary_pos_emb=True"),
        lambda: x_transformers_program("xt_alibi", "dim=16, depth=2, heads=2, alibi_pos_bias=True, "
                                                    "attn_num_mem_kv=2"),
        lambda: x_transformers_program("xt_relpos", "dim=16, depth=2, heads=2, rel_pos_bias=True, "
                                                     "use_scalenorm=True"),
        rotary_program, kornia_geometry_program, kornia_keypoints_program, roma_program, torchmetrics_program,
        lambda: diffusers_program("scheduling_ddpm", "ddpm_copy", "DDPMScheduler"),
        lambda: diffusers_program("scheduling_ddim", "ddim_copy", "DDIMScheduler"),
        sampler_program, geometric_program, pyro_program, gpytorch_program, nflows_program, zuko_program,
        torchdiffeq_program, monai_program,
    )
    out = []
    for make in makers:
        try:
            program = make()
        except ImportError as error:
            print(f"library_programs: left out: {error}")
            continue
        missing = [n for n in program.needs if importlib.util.find_spec(n) is None]
        if missing:
            print(f"library_programs: {program.name} needs {', '.join(missing)}")
            continue
        out.append(program)
    return out
