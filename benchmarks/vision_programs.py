"""torchvision's and timm's model code as mutation-corpus programs.

As with transformers (``tests/programs.py``), the code is read from the installed packages when
the corpus runs and saved as the user's own module files next to the notebook: a user who copied
a model file to change it. Nothing of it is kept here; this file holds only which files, the
tiny sizes they run at, and the cells that train a step and predict.

* Detection: the parts of torchvision's Faster R-CNN (anchor generator, region proposal network,
  RoI heads, the batching transform, box coding), copied together with their imports of each
  other pointing at the copies, and assembled in a cell as a custom detector is assembled.
* Optical flow: torchvision's RAFT and its grid helpers, trained on a random image pair.
* Image classifiers with device placements of their own: torchvision's Swin and MaxViT; timm's
  LeViT, Swin V1/V2, BEiT, XCiT, MViTv2, ConViT, EfficientViT (MSRA), TinyViT, EfficientFormerV2,
  EdgeNeXt and ViT (relative-position indices, attention biases and masks, position embeddings).
* Single-stage detectors: torchvision's SSD (its default boxes) and RetinaNet, from the user's
  copies of their files and the parts they share with Faster R-CNN, on a two-level backbone.

torchvision's registry refuses a model name twice, so the copies drop ``@register_model()``
(timm's registry allows it). Needs ``torchvision`` and ``timm`` built for the installed torch.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from programs import Program, absolute_imports

_TV = "torchvision.models"


def _copies(modules: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """The user's copies of ``modules`` (full name -> the copy's module name), importing each other."""
    out = []
    for full, local in modules.items():
        source = absolute_imports(full, modules)
        source = "\n".join(line for line in source.split("\n") if line.strip() != "@register_model()")
        out.append((f"{local}.py", source))
    return tuple(out)


_STEP = ("loss = torch.nn.functional.cross_entropy(model(images), labels)\n"
         "loss.backward()\nopt.step()\nopt.zero_grad()")
_PREDICT = "model.eval()\nwith torch.no_grad():\n    predictions = model(images).argmax(-1)"


@dataclass(frozen=True)
class _Classifier:
    name: str
    origin: str
    module: str
    model_class: str
    arguments: str
    image_size: int = 32
    #: Other names of the module the arguments use (a config class).
    imports: tuple[str, ...] = ()


CLASSIFIERS = (
    _Classifier("tv_swin", "torchvision", f"{_TV}.swin_transformer", "SwinTransformer",
                "patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 2], window_size=[4, 4], num_classes=3"),
    _Classifier("tv_maxvit", "torchvision", f"{_TV}.maxvit", "MaxVit",
                "input_size=(32, 32), stem_channels=8, partition_size=2, block_channels=[16, 32], "
                "block_layers=[1, 1], head_dim=8, stochastic_depth_prob=0.0, num_classes=3"),
    _Classifier("timm_levit", "timm", "timm.models.levit", "Levit",
                "img_size=32, embed_dim=(16, 32), key_dim=8, num_heads=(2, 2), depth=(1, 1), num_classes=3"),
    _Classifier("timm_levit_conv", "timm", "timm.models.levit", "Levit",
                "img_size=32, embed_dim=(16, 32), key_dim=8, num_heads=(2, 2), depth=(1, 1), num_classes=3, "
                "use_conv=True"),
    _Classifier("timm_swin", "timm", "timm.models.swin_transformer", "SwinTransformer",
                "img_size=32, patch_size=4, embed_dim=16, depths=(2, 2), num_heads=(2, 2), window_size=4, "
                "num_classes=3"),
    _Classifier("timm_swinv2", "timm", "timm.models.swin_transformer_v2", "SwinTransformerV2",
                "img_size=32, patch_size=4, embed_dim=16, depths=(2, 2), num_heads=(2, 2), window_size=4, "
                "num_classes=3"),
    _Classifier("timm_beit", "timm", "timm.models.beit", "Beit",
                "img_size=32, patch_size=8, embed_dim=16, depth=2, num_heads=2, num_classes=3, use_rel_pos_bias=True"),
    _Classifier("timm_xcit", "timm", "timm.models.xcit", "Xcit",
                "img_size=32, patch_size=8, embed_dim=16, depth=2, num_heads=2, num_classes=3, cls_attn_layers=1"),
    _Classifier("timm_mvitv2", "timm", "timm.models.mvitv2", "MultiScaleVit",
                "MultiScaleVitCfg(depths=(1, 1), embed_dim=16, num_heads=1), img_size=(32, 32), num_classes=3",
                imports=("MultiScaleVitCfg",)),
    _Classifier("timm_convit", "timm", "timm.models.convit", "ConVit",
                "img_size=32, patch_size=8, embed_dim=16, depth=2, num_heads=2, num_classes=3, local_up_to_layer=1"),
    _Classifier("timm_efficientvit_msra", "timm", "timm.models.efficientvit_msra", "EfficientVitMsra",
                "img_size=64, embed_dim=(16, 32, 48), key_dim=(8, 8, 8), depth=(1, 1, 1), num_heads=(2, 2, 2), "
                "window_size=(2, 2, 2), num_classes=3", 64),
    _Classifier("timm_tiny_vit", "timm", "timm.models.tiny_vit", "TinyVit",
                "embed_dims=(16, 32, 32, 48), depths=(1, 1, 1, 1), num_heads=(1, 2, 2, 2), "
                "window_sizes=(2, 2, 2, 2), num_classes=3", 64),
    _Classifier("timm_efficientformer_v2", "timm", "timm.models.efficientformer_v2", "EfficientFormerV2",
                "depths=(1, 1, 1, 1), embed_dims=(16, 16, 32, 32), num_vit=1, img_size=64, num_classes=3", 64),
    _Classifier("timm_edgenext", "timm", "timm.models.edgenext", "EdgeNeXt",
                "dims=(16, 24, 32, 48), depths=(1, 1, 1, 1), global_block_counts=(0, 1, 1, 1), heads=(2, 2, 2, 2), "
                "d2_scales=(2, 2, 2, 2), num_classes=3", 64),
    _Classifier("timm_vit", "timm", "timm.models.vision_transformer", "VisionTransformer",
                "img_size=32, patch_size=8, embed_dim=16, depth=2, num_heads=2, num_classes=3"),
)


def classifier_program(c: _Classifier) -> Program:
    local = c.module.rsplit(".", 1)[1]
    imported = ", ".join((c.model_class, *c.imports))
    cells = (
        f"import torch\nfrom {local} import {imported}\ndevice = torch.device('DEVICE')",
        f"torch.manual_seed(0)\nmodel = {c.model_class}({c.arguments}).to(device)\n"
        "opt = torch.optim.AdamW(model.parameters(), lr=1e-3)",
        f"images = torch.randn(2, 3, {c.image_size}, {c.image_size}, device=device)\n"
        "labels = torch.tensor([0, 2], device=device)",
        _STEP,
        _PREDICT,
    )
    return Program(c.name, c.origin, cells, files=_copies({c.module: local}), needs=(c.origin,),
                   fixed_cells=frozenset({0}))


_DETECTION = f"{_TV}.detection"


def detection_program() -> Program:
    """A Faster R-CNN put together from the user's copies of torchvision's parts, on a small backbone."""
    parts = {f"{_DETECTION}.{name}": local for name, local in (
        ("_utils", "det_utils"), ("image_list", "image_list"), ("anchor_utils", "anchor_utils"),
        ("rpn", "rpn"), ("roi_heads", "roi_heads"), ("transform", "transform"),
        ("generalized_rcnn", "generalized_rcnn"))}
    cells = (
        "import torch\nfrom torch import nn\nimport torchvision\n"
        "from torchvision.models.detection.faster_rcnn import TwoMLPHead, FastRCNNPredictor\n"
        "from anchor_utils import AnchorGenerator\nfrom rpn import RegionProposalNetwork, RPNHead\n"
        "from roi_heads import RoIHeads\nfrom transform import GeneralizedRCNNTransform\n"
        "from generalized_rcnn import GeneralizedRCNN\ndevice = torch.device('DEVICE')",
        "torch.manual_seed(0)\n"
        "backbone = nn.Sequential(nn.Conv2d(3, 16, 3, stride=4, padding=1), nn.ReLU())\n"
        "anchors = AnchorGenerator(sizes=((16, 32),), aspect_ratios=((0.5, 1.0, 2.0),))\n"
        "rpn = RegionProposalNetwork(anchors, RPNHead(16, 6), fg_iou_thresh=0.7, bg_iou_thresh=0.3,\n"
        "                            batch_size_per_image=32, positive_fraction=0.5,\n"
        "                            pre_nms_top_n=dict(training=64, testing=32),\n"
        "                            post_nms_top_n=dict(training=32, testing=16), nms_thresh=0.7)\n"
        "pooler = torchvision.ops.MultiScaleRoIAlign(['0'], output_size=4, sampling_ratio=2)\n"
        "heads = RoIHeads(pooler, TwoMLPHead(16 * 4 * 4, 32), FastRCNNPredictor(32, 3), fg_iou_thresh=0.5,\n"
        "                 bg_iou_thresh=0.5, batch_size_per_image=32, positive_fraction=0.25,\n"
        "                 bbox_reg_weights=None, score_thresh=0.05, nms_thresh=0.5, detections_per_img=10)\n"
        "transform = GeneralizedRCNNTransform(64, 64, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225])\n"
        "model = GeneralizedRCNN(backbone, rpn, heads, transform).to(device)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=1e-3)",
        "images = [torch.rand(3, 64, 64, device=device) for _ in range(2)]\n"
        "targets = [{'boxes': torch.tensor([[4.0, 6.0, 40.0, 50.0]], device=device),\n"
        "            'labels': torch.tensor([1], device=device)} for _ in range(2)]",
        "model.train()\nlosses = model(images, targets)\nloss = sum(losses.values())\nloss.backward()\n"
        "opt.step()\nopt.zero_grad()",
        "model.eval()\nwith torch.no_grad():\n    detections = model(images)",
    )
    return Program("tv_faster_rcnn", "torchvision", cells, files=_copies(parts), needs=("torchvision",),
                   fixed_cells=frozenset({0}))


_SINGLE_STAGE_DATA = (
    "images = [torch.rand(3, 64, 64, device=device) for _ in range(2)]\n"
    "targets = [{'boxes': torch.tensor([[4.0, 6.0, 40.0, 50.0]], device=device),\n"
    "            'labels': torch.tensor([1], device=device)} for _ in range(2)]")
_TWO_LEVELS = (
    "class Backbone(nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.out_channels = 8\n"
    "        self.first = nn.Conv2d(3, 8, 3, stride=4, padding=1)\n"
    "        self.second = nn.Conv2d(8, 8, 3, stride=2, padding=1)\n"
    "    def forward(self, x):\n"
    "        low = torch.relu(self.first(x))\n"
    "        return OrderedDict([('0', low), ('1', torch.relu(self.second(low)))])\n")


def single_stage_program(name: str) -> Program:
    """torchvision's SSD or RetinaNet from the user's copies of its file and parts, on a two-level backbone."""
    own = {"ssd": "ssd", "retinanet": "retinanet"}[name]
    parts = {f"{_DETECTION}.{part}": local for part, local in (
        ("_utils", "det_utils"), ("anchor_utils", "anchor_utils"), ("image_list", "image_list"),
        ("transform", "transform"), (own, own))}
    if name == "ssd":
        model = ("anchors = DefaultBoxGenerator([[2], [2]])\n"
                 "head = SSDHead([8, 8], anchors.num_anchors_per_location(), num_classes=3)\n"
                 "model = SSD(Backbone(), anchors, (64, 64), num_classes=3, head=head, topk_candidates=20,\n"
                 "            detections_per_img=10).to(device)\n")
        imports = "from anchor_utils import DefaultBoxGenerator\nfrom ssd import SSD, SSDHead\n"
    else:
        model = ("anchors = AnchorGenerator(sizes=((16, 32), (32, 64)), aspect_ratios=((0.5, 1.0, 2.0),) * 2)\n"
                 "head = RetinaNetHead(8, anchors.num_anchors_per_location()[0], num_classes=3)\n"
                 "model = RetinaNet(Backbone(), 3, min_size=64, max_size=64, anchor_generator=anchors, head=head,\n"
                 "                  topk_candidates=20, detections_per_img=10).to(device)\n")
        imports = "from anchor_utils import AnchorGenerator\nfrom retinanet import RetinaNet, RetinaNetHead\n"
    cells = (
        "import torch\nfrom torch import nn\nfrom collections import OrderedDict\n" + imports
        + "device = torch.device('DEVICE')",
        "torch.manual_seed(0)\n" + _TWO_LEVELS + model + "opt = torch.optim.SGD(model.parameters(), lr=1e-3)",
        _SINGLE_STAGE_DATA,
        "model.train()\nlosses = model(images, targets)\nloss = sum(losses.values())\nloss.backward()\n"
        "opt.step()\nopt.zero_grad()",
        "model.eval()\nwith torch.no_grad():\n    detections = model(images)",
    )
    return Program(f"tv_{name}", "torchvision", cells, files=_copies(parts), needs=("torchvision",),
                   fixed_cells=frozenset({0}))


def optical_flow_program() -> Program:
    """torchvision's RAFT (small) and its grid helpers, a training step on a random image pair."""
    copies = _copies({f"{_TV}.optical_flow.raft": "raft", f"{_TV}.optical_flow._utils": "flow_utils"})
    # (raft.py imports its helpers as ``from ._utils import ...``: the copy's module is flow_utils.)
    cells = (
        "import torch\nfrom raft import raft_small\ndevice = torch.device('DEVICE')",
        "torch.manual_seed(0)\nmodel = raft_small(weights=None).to(device)\n"
        "opt = torch.optim.AdamW(model.parameters(), lr=1e-4)",
        "first = torch.rand(1, 3, 128, 128, device=device) * 2 - 1\n"
        "second = torch.roll(first, shifts=2, dims=-1)\n"
        "flow_truth = torch.zeros(1, 2, 128, 128, device=device)\nflow_truth[:, 0] = 2.0",
        "flows = model(first, second, num_flow_updates=2)\n"
        "loss = sum((f - flow_truth).abs().mean() for f in flows)\nloss.backward()\nopt.step()\nopt.zero_grad()",
        "model.eval()\nwith torch.no_grad():\n    flow = model(first, second, num_flow_updates=2)[-1]",
    )
    return Program("tv_raft", "torchvision", cells, files=copies, needs=("torchvision",), fixed_cells=frozenset({0}))


def vision_programs() -> list[Program]:
    return [detection_program(), single_stage_program("ssd"), single_stage_program("retinanet"),
            optical_flow_program()] + [classifier_program(c) for c in CLASSIFIERS]
