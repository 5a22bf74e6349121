"""An exported graph evaluated as ``tools/test.py`` evaluates a checkpoint:
the config's test dataloader, data preprocessor, post-processing and metric,
with the network run in ONNX Runtime or OpenVINO, FP32 or INT8
(:class:`DeployedModel`); and the calibration images of the INT8 quantizers,
from the config's own data (:func:`calibration_images`).

The graph is the tensor network of :mod:`.networks`; what it leaves out is
the PyTorch model's: its data preprocessor before, and after it the head's
post-processing (mmpretrain's scores and labels, mmdet's
``predict_by_feat``, mmseg's resizing to the input and the original
image). DETR's network takes unpadded images, so every image runs alone at
the size the test pipeline gave it.
"""

import copy
from typing import Callable, Dict, List, Sequence, Tuple

import numpy as np
import torch
import torch.nn as nn
from mmengine.config import Config
from mmengine.evaluator import Evaluator
from mmengine.model import BaseModel
from mmengine.registry import DefaultScope
from mmengine.runner import Runner
from mmengine.utils import ProgressBar

from .networks import TASK_SCOPES, check_task
from .runtimes import make_session

#: The metric of each task's evaluator that INT8 is judged by, and its
#: factor to points (COCO's mAP is a fraction).
METRICS = {
    'classifier': ('accuracy/top1', 1.0),
    'detr': ('coco/bbox_mAP', 100.0),
    'upernet': ('mIoU', 1.0),
}
#: Where calibration images come from: a ``calib_dataloader`` of the
#: config, or the train or val split through the test pipeline.
CALIB_SPLITS = ('calib', 'train', 'val')


def network_inputs(
    task: str, inputs: torch.Tensor, data_samples: Sequence
) -> List[Tuple[np.ndarray, list]]:
    """The arrays the exported network of ``task`` takes for one
    preprocessed batch, each with its data samples."""
    if task != 'detr':
        return [(inputs.numpy(), list(data_samples))]
    return [
        (image[None, :, : s.img_shape[0], : s.img_shape[1]].numpy(), [s])
        for image, s in zip(inputs, data_samples)
    ]


def predictions(
    task: str, model: nn.Module, outputs: Sequence, data_samples: list
) -> list:
    """The data samples with the predictions of ``model``'s post-processing
    applied to the network's raw ``outputs``."""
    outputs = [torch.from_numpy(np.asarray(out)) for out in outputs]
    if task == 'classifier':
        return model.head._get_predictions(outputs[0], data_samples)
    metas = [sample.metainfo for sample in data_samples]
    if task == 'detr':
        results = model.bbox_head.predict_by_feat(*outputs, metas)
        return model.add_pred_to_datasample(data_samples, results)
    logits = model.decode_head.predict_by_feat(outputs[0], metas)
    return model.postprocess_result(logits, data_samples)


class DeployedModel(BaseModel):
    """``model`` with its network replaced by ``run`` (an exported graph in a
    runtime: one array in, the outputs out); ``test_step`` as the model's."""

    def __init__(
        self, task: str, model: nn.Module, run: Callable[[np.ndarray], list]
    ):
        if task == 'upernet' and model.test_cfg.get('mode') == 'slide':
            raise ValueError(
                "the graph runs whole images: test_cfg.mode='whole'"
            )
        super().__init__(data_preprocessor=model.data_preprocessor)
        self.task, self.model, self.run = task, model, run

    def forward(self, inputs, data_samples=None, mode='predict'):
        results = []
        for array, samples in network_inputs(self.task, inputs, data_samples):
            results += predictions(
                self.task, self.model, self.run(array), samples
            )
        return results


def deployed_model(
    cfg: Config, model: nn.Module, graph: str, runtime: str
) -> DeployedModel:
    """``model``, built from ``cfg``, around the exported ``graph`` (FP32
    or INT8) run in ``runtime``: what ``tools/test.py`` tests."""
    scope = cfg.get('default_scope')
    task = next((t for t, s in TASK_SCOPES.items() if s == scope), 'backbone')
    check_task(task, model, scope)
    return DeployedModel(task, model, make_session(graph, runtime))


def build_loader(cfg: Config, loader_cfg) -> torch.utils.data.DataLoader:
    with DefaultScope.overwrite_default_scope(cfg.get('default_scope')):
        return Runner.build_dataloader(loader_cfg)


def evaluate(deployed: DeployedModel, cfg: Config) -> Dict[str, float]:
    """The metrics of ``cfg``'s test evaluator on its test dataloader."""
    loader = build_loader(cfg, cfg.test_dataloader)
    with DefaultScope.overwrite_default_scope(cfg.get('default_scope')):
        evaluator = Evaluator(cfg.test_evaluator)
    evaluator.dataset_meta = loader.dataset.metainfo
    progress = ProgressBar(len(loader.dataset))
    with torch.no_grad():
        for batch in loader:
            evaluator.process(deployed.test_step(batch), batch)
            progress.update(len(batch['inputs']))
    print(flush=True)
    return evaluator.evaluate(len(loader.dataset))


def calibration_images(
    task: str,
    model: nn.Module,
    cfg: Config,
    split: str,
    count: int,
    seed: int = 0,
) -> List[np.ndarray]:
    """``count`` images drawn at random (``seed``) from ``cfg``'s
    ``{split}_dataloader``, through the test pipeline (a train split's own
    augments are left out) and ``model``'s data preprocessor, as the
    network of ``task`` takes them: one image per array."""
    loader_cfg = copy.deepcopy(cfg[f'{split}_dataloader'])
    if split == 'train':
        if 'pipeline' not in loader_cfg.dataset:
            raise ValueError(
                'the train dataset wraps another: use --calib-split'
            )
        loader_cfg.dataset.pipeline = cfg.test_dataloader.dataset.pipeline
    loader_cfg.update(
        batch_size=1,
        num_workers=0,
        persistent_workers=False,
        sampler=dict(type='DefaultSampler', shuffle=False),
    )
    loader = build_loader(cfg, loader_cfg)
    dataset = loader.dataset
    chosen = np.random.default_rng(seed).choice(
        len(dataset), min(count, len(dataset)), replace=False
    )
    images = []
    with torch.no_grad():
        for index in sorted(chosen):
            data = model.data_preprocessor(
                loader.collate_fn([dataset[index]]), False
            )
            images += [
                array
                for array, _ in network_inputs(
                    task, data['inputs'], data['data_samples']
                )
            ]
    return images
