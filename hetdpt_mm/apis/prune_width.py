"""``tools/prune_width.py``: width-prune a checkpoint's HetDPTViT (HetDPT+,
or the width-only baseline from dense weights) to a MACs target or by a
ratio, and write the result with its record and report."""

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Optional, Union

import torch
from mmengine.logging import print_log

from ..analysis import MACS_CONVENTIONS
from ..checkpoint.safe_load import load_checkpoint_file
from ..fileio import check_output_paths, checkpoint_writer, write_outputs
from ..merge import parse_arch
from ..pruning.width_checkpoint import prune_width_checkpoint
from ..visualization import figure_formats, plot_widths

_MACS = re.compile(r'^\s*([0-9]*\.?[0-9]+)\s*([kKmMgG]?)\s*$')
_SCALE = {'': 1, 'k': 1e3, 'm': 1e6, 'g': 1e9}
#: ImageNet normalisation and the eval crop of Isomorphic Pruning's
#: calibration batches (resize 256, bicubic, centre crop 224).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def parse_macs(value: Union[str, float]) -> float:
    """``2.4G``, ``2400M``, ``2.4e9`` -> multiply-accumulates (> 0)."""
    match = _MACS.match(str(value))
    try:
        macs = (
            float(value)
            if match is None
            else float(match.group(1)) * _SCALE[match.group(2).lower()]
        )
    except ValueError:
        macs = math.nan
    # 0 and nan would be searched for before failing.
    if not (math.isfinite(macs) and macs > 0):
        raise ValueError(f'MACs target {value!r}: give e.g. 2.4G, 2400M')
    return macs


@dataclass
class PruneWidthOptions:
    input: Path
    output: Path
    target_macs: Union[None, str, float] = None
    ratio: Optional[float] = None
    #: a key of MACS_CONVENTIONS: whether MACs count attention's products
    macs_convention: str = 'with-attention-products'
    importance: str = 'taylor'
    calib_dir: Optional[Path] = None
    calib_batches: int = 50
    calib_batch_size: int = 64
    max_ratio: float = 0.9
    search_steps: int = 10
    prefix: Optional[str] = None
    arch: Optional[str] = None
    report: Optional[Path] = None
    plot: Optional[Path] = None
    force: bool = False


def calibration_batches(
    root: Path, batches: int, batch_size: int, img_size
) -> Iterator[List[torch.Tensor]]:
    """Labelled batches of an ImageFolder (``root/<class>/<image>``), in
    the evaluation transform, for Taylor importance."""
    from torchvision import datasets, transforms

    if not root.is_dir():
        raise FileNotFoundError(f'--calib-dir {root} is not a directory')
    size = tuple(img_size)
    transform = transforms.Compose(
        [
            transforms.Resize(
                int(size[0] * 256 / 224),
                interpolation=transforms.InterpolationMode.BICUBIC,
            ),
            transforms.CenterCrop(size),
            transforms.ToTensor(),
            transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
        ]
    )
    dataset = datasets.ImageFolder(str(root), transform=transform)
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        generator=torch.Generator().manual_seed(0),
    )
    for index, (images, labels) in enumerate(loader):
        if index >= batches:
            break
        yield [images, labels]


def run_prune_width(options: PruneWidthOptions) -> None:
    if (options.target_macs is None) == (options.ratio is None):
        raise ValueError('give either --target-macs (e.g. 2.4G) or --ratio')
    if options.importance == 'taylor' and options.calib_dir is None:
        raise ValueError('--importance taylor needs --calib-dir DIR')
    check_output_paths(
        [
            path
            for path in (options.output, options.report, options.plot)
            if path is not None
        ],
        [options.input],
        options.force,
    )
    if (
        options.plot is not None
        and options.plot.suffix.lstrip('.').lower() not in figure_formats()
    ):
        raise ValueError(f'--plot: use one of {sorted(figure_formats())}')
    target = (
        None
        if options.target_macs is None
        else parse_macs(options.target_macs)
    )
    checkpoint = load_checkpoint_file(options.input)
    calibration = None
    if options.calib_dir is not None:
        from ..checkpoint.reader import read_backbone_checkpoint

        record = read_backbone_checkpoint(
            checkpoint, str(options.input), options.prefix
        ).record
        img_size = (record.arch or {}).get('img_size', (224, 224))
        calibration = calibration_batches(
            options.calib_dir,
            options.calib_batches,
            options.calib_batch_size,
            img_size,
        )
    pruned, result = prune_width_checkpoint(
        checkpoint,
        prefix=options.prefix,
        arch=parse_arch(options.arch),
        source=str(options.input),
        target_macs=target,
        ratio=options.ratio,
        importance=options.importance,
        calibration=calibration,
        max_ratio=options.max_ratio,
        search_steps=options.search_steps,
        attention_products=MACS_CONVENTIONS[options.macs_convention],
        logger=lambda line: print_log(line, logger='current'),
    )
    outputs = {options.output: checkpoint_writer(pruned, options.output)}
    if options.report is not None:
        outputs[options.report] = json.dumps(
            dict(
                input=str(options.input),
                output=str(options.output),
                spec=result.record.spec.to_dict(),
                **result.report(),
            ),
            indent=2,
        )
    if options.plot is not None:
        outputs[options.plot] = plot_widths(
            result.record.spec, options.plot.suffix.lstrip('.').lower()
        )
    write_outputs(outputs, exclusive=not options.force)
    print(f'{options.input} -> {options.output}\n{result.format()}')
