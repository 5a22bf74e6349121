"""Export a model (from a config and a checkpoint) to ONNX and verify the
exported graph against PyTorch: what ``tools/export.py`` runs.

The exported graph takes a float32 NCHW batch that is already normalised
(the config's data preprocessor is not part of it) and gives the raw
network outputs of :mod:`.networks`. Its batch axis is dynamic, and so are
height and width unless ``static_hw``: position-embedding interpolation,
patch padding and pooling are traced as computations on the input size.
A token-merging backbone (ToMe) exports with ``static_hw`` only.

Every requested size is first run in PyTorch (a size the model cannot take
is reported before anything is written); the graph is then exported to a
temporary file, run in each verification runtime on the same random inputs
at every size and batch size, and kept only if the largest absolute
difference to PyTorch is within the tolerance.

With ``int8``, the verified graph is then quantized for each runtime
(:mod:`.quantize`), calibrated on images of the config's own data, and the
FP32 and INT8 graphs are evaluated with the config's test dataloader and
metric (:mod:`.evaluate`); every file is kept only if no INT8 graph loses
more than ``max_drop`` points of that metric.
"""

import functools
import itertools
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from ..errors import UsageError, VerificationError
from ..fileio import check_input_file, check_output_paths, write_outputs
from .evaluate import (
    METRICS,
    DeployedModel,
    calibration_images,
    evaluate,
)
from .networks import (
    build_network,
    exportable,
    load_model,
    output_names,
)
from .quantize import DEFAULT_KEEP_FP32, INT8_SUFFIXES, QUANTIZERS, fp32_nodes
from .runtimes import OPSET, export_onnx, make_session

__all__ = ['ExportOptions', 'VerificationError', 'run_export']

#: The backbones' token reductions, and what each does to the tokens.
TOKEN_REDUCTIONS = {'token_merge': 'merges', 'graph_propagation': 'propagates'}


@dataclass
class ExportOptions:
    """What ``tools/export.py`` takes (see its help)."""

    task: str  # one of TASKS
    config: str
    checkpoint: str
    out: Path
    img_size: Optional[Sequence[int]] = None  # H W of the example input
    batch_size: int = 2  # of the example input (>= 2: a dynamic axis)
    static_hw: bool = False  # fix height and width to img_size
    verify_sizes: Sequence[Sequence[int]] = ()  # H W each; [img_size]
    verify_batch_sizes: Sequence[int] = (1, 3)
    runtimes: Sequence[str] = ('onnxruntime',)
    tolerance: float = 1e-4
    cfg_options: Optional[Dict[str, Any]] = None
    seed: int = 0
    force: bool = False
    int8: bool = False  # also quantize for each runtime
    calib_images: int = 256
    #: evaluate.CALIB_SPLITS; None: calib if the config has one, else train
    calib_split: Optional[str] = None
    calib_method: str = 'minmax'  # ONNX Runtime's, CALIBRATION_METHODS
    keep_fp32: Sequence[str] = DEFAULT_KEEP_FP32  # quantize.FP32_GROUPS
    int8_scope: str = 'network'  # or 'backbone'
    max_drop: float = 1.0  # points of the task's metric (evaluate.METRICS)


def int8_paths(out: Path, runtime: str) -> List[Path]:
    """The files of the INT8 graph of ``runtime`` beside the FP32 ``out``:
    ``NAME.int8.onnx``, or the IR ``NAME.int8.xml`` and ``NAME.int8.bin``."""
    stem = out.with_suffix('')
    path = Path(f'{stem}.int8{INT8_SUFFIXES[runtime]}')
    return [path] + (
        [path.with_suffix('.bin')] if runtime == 'openvino' else []
    )


def check_options(options: ExportOptions) -> None:
    """What ``tools/export.py``'s parser leaves open (its choices take the
    task and runtimes, ``positive_float`` the tolerance)."""
    for name in ('config', 'checkpoint'):
        check_input_file(getattr(options, name), name)
    if options.batch_size < 2:  # an example batch of 1 fixes the batch axis
        raise UsageError('--batch-size must be >= 2')
    if min(*options.verify_batch_sizes, options.calib_images) < 1:
        raise UsageError('--verify-batch-sizes, --calib-images must be >= 1')
    if options.int8 and options.task not in METRICS:
        raise UsageError('--int8: the backbone task has no metric to verify')
    outputs = [options.out] + [
        path
        for r in (options.runtimes if options.int8 else ())
        for path in int8_paths(options.out, r)
    ]
    check_output_paths(
        outputs, [options.config, options.checkpoint], options.force
    )


def resolve_sizes(
    options: ExportOptions, model
) -> Tuple[Tuple[int, int], List[Tuple[int, int]]]:
    """The example size (default: the size the backbone's position
    embedding is stored at) and the sizes to verify."""
    img_size = options.img_size or getattr(
        model.backbone, 'img_size', (224, 224)
    )
    sizes = [tuple(img_size)] + [tuple(s) for s in options.verify_sizes]
    if options.static_hw and len(set(sizes)) > 1:
        raise UsageError('--static-hw verifies at --img-size only')
    return sizes[0], list(dict.fromkeys(sizes))


def reference_outputs(net, sizes, batch_sizes, seed) -> List[Dict]:
    """Random inputs at every size and batch size with PyTorch's outputs;
    a size the model cannot take raises ``ValueError``."""
    generator = torch.Generator().manual_seed(seed)
    cases = []
    for (height, width), batch in itertools.product(sizes, batch_sizes):
        try:
            inputs = torch.randn(batch, 3, height, width, generator=generator)
            with torch.no_grad():
                outputs = torch.utils._pytree.tree_leaves(net(inputs))
        except (RuntimeError, ValueError, AssertionError) as err:
            raise ValueError(f'input size {height}x{width}: {err}') from None
        outputs = [o.numpy() for o in outputs]
        cases.append(dict(inputs=inputs.numpy(), outputs=outputs))
    return cases


def verify(
    path: Path, cases: List[Dict], runtimes: Sequence[str], tolerance: float
) -> List[Dict[str, Any]]:
    """Run every case in every runtime; one result row per case."""
    rows = []
    for runtime in runtimes:
        run = make_session(path, runtime)
        for case in cases:
            got = run(case['inputs'])
            expected = case['outputs']
            if len(got) != len(expected) or any(
                g.shape != e.shape for g, e in zip(got, expected)
            ):
                diff = float('inf')
            else:
                # np.max, not max(): a NaN in any output is the maximum.
                diff = float(
                    np.max(
                        [np.abs(g - e).max() for g, e in zip(got, expected)]
                    )
                )
            rows.append(
                dict(
                    runtime=runtime,
                    input=list(case['inputs'].shape),
                    outputs=[list(e.shape) for e in expected],
                    got=[list(g.shape) for g in got],
                    max_abs_diff=diff,
                    ok=diff <= tolerance,
                )
            )
    return rows


def format_rows(rows: List[Dict[str, Any]], tolerance: float) -> str:
    lines = [
        f'| runtime | input | outputs | max abs diff | within {tolerance:g} |',
        '| --- | --- | --- | ---: | --- |',
    ]
    for row in rows:
        shapes = ', '.join('x'.join(map(str, s)) for s in row['got'])
        lines.append(
            f'| {row["runtime"]} | '
            f'{"x".join(map(str, row["input"]))} | {shapes} | '
            f'{row["max_abs_diff"]:.3g} | '
            f'{"yes" if row["ok"] else "NO"} |'
        )
    return '\n'.join(lines)


def run_export(options: ExportOptions) -> List[Dict[str, Any]]:
    """Export and verify; returns the verification rows. Raises
    ``UsageError`` / ``ValueError`` for bad input (nothing written) and
    :class:`VerificationError` when a difference exceeds the tolerance
    (nothing written either)."""
    check_options(options)
    model, cfg = load_model(
        options.config, options.checkpoint, options.cfg_options
    )
    scope = cfg.get('default_scope')
    if options.int8:
        calib_split(options, cfg)  # before the export
    for option, verb in TOKEN_REDUCTIONS.items():
        # How many tokens each block keeps follows from the number of
        # patches; with symbolic H and W torch.export runs on and on (over
        # 10 minutes for a 4-block model with token merging).
        if getattr(model.backbone, option, None) and not options.static_hw:
            raise UsageError(
                f'the backbone {verb} tokens ({option}): add --static-hw'
            )
    net = build_network(options.task, model, scope)
    img_size, sizes = resolve_sizes(options, model)
    cases = reference_outputs(
        net, sizes, options.verify_batch_sizes, options.seed
    )
    example = torch.randn(
        options.batch_size,
        3,
        *img_size,
        generator=torch.Generator().manual_seed(options.seed),
    )
    names = output_names(options.task, len(cases[0]['outputs']))
    axes = 'batch' + ('' if options.static_hw else ', height, width')
    print(
        f'exporting {options.task} ({type(model).__name__}, backbone '
        f'{describe_backbone(model)}) at opset {OPSET}, example input '
        f'{options.batch_size}x3x{img_size[0]}x{img_size[1]}, dynamic '
        f'{axes}',
        flush=True,
    )
    with tempfile.TemporaryDirectory() as work:
        fp32 = Path(work) / 'model.onnx'
        export_onnx(
            exportable(net),
            example,
            fp32,
            names,
            dynamic_hw=not options.static_hw,
        )
        rows = verify(fp32, cases, options.runtimes, options.tolerance)
        print(format_rows(rows, options.tolerance))
        bad = sum(not row['ok'] for row in rows)  # the table shows which
        if bad:
            raise VerificationError(
                f'{bad} checks differ from PyTorch by more than --tolerance'
            )
        files = {options.out: fp32}
        if options.int8:
            files.update(quantize_and_verify(options, model, cfg, fp32))
        write_outputs(
            {
                out: functools.partial(shutil.move, src)
                for out, src in files.items()
            }
        )
    print('wrote ' + ', '.join(map(str, files)))
    return rows


def calib_split(options: ExportOptions, cfg) -> str:
    """``--calib-split``, by default the config's calib split if it has
    one, else train."""
    split = options.calib_split or (
        'calib' if 'calib_dataloader' in cfg else 'train'
    )
    if f'{split}_dataloader' not in cfg:
        raise UsageError(f'the config has no {split}_dataloader')
    return split


def quantize_and_verify(
    options: ExportOptions, model, cfg, fp32: Path
) -> Dict[Path, Path]:
    """The INT8 graph of every runtime, calibrated and evaluated against
    the FP32 graph; returns ``{output: its file}`` or raises
    :class:`VerificationError`."""
    import onnx

    split = calib_split(options, cfg)
    images = calibration_images(
        options.task, model, cfg, split, options.calib_images, options.seed
    )
    kept = fp32_nodes(onnx.load(fp32), options.keep_fp32, options.int8_scope)
    print(
        f'INT8: calibrating on {len(images)} {split} images; FP32: '
        f'{", ".join(options.keep_fp32) or "-"} ({len(kept)} products), '
        f'scope {options.int8_scope}',
        flush=True,
    )
    metric = METRICS[options.task][0]
    first = options.runtimes[0]
    rows = [
        dict(
            runtime=first,
            precision='fp32',
            file=options.out,
            value=metric_points(options.task, model, cfg, fp32, first),
        )
    ]
    files = {}
    for runtime in options.runtimes:
        paths = int8_paths(options.out, runtime)
        int8 = fp32.with_name('model.int8' + INT8_SUFFIXES[runtime])
        QUANTIZERS[runtime](fp32, int8, images, kept, options.calib_method)
        files.update(zip(paths, [int8, int8.with_suffix('.bin')]))
        rows.append(
            dict(
                runtime=runtime,
                precision='int8',
                file=paths[0],
                value=metric_points(options.task, model, cfg, int8, runtime),
            )
        )
    reference = rows[0]['value']
    print(f'| runtime | precision | file | {metric} | vs FP32 |')
    print('| --- | --- | --- | ---: | ---: |')
    for row in rows:
        row['drop'] = reference - row['value']
        change = f'{-row["drop"]:+.2f}' if row['precision'] == 'int8' else '-'
        print(
            f'| {row["runtime"]} | {row["precision"]} | {row["file"]} | '
            f'{row["value"]:.2f} | {change} |'
        )
    if max(row['drop'] for row in rows) > options.max_drop:
        raise VerificationError('INT8 loses more than --max-drop points')
    return files


def metric_points(task: str, model, cfg, graph: Path, runtime: str) -> float:
    """The task's metric (:data:`METRICS`) of ``graph`` in ``runtime`` on
    the config's test split, in points."""
    metric, points = METRICS[task]
    values = evaluate(
        DeployedModel(task, model, make_session(graph, runtime)), cfg
    )
    if metric not in values:
        raise ValueError(f"the config's test evaluator gives no {metric}")
    return points * values[metric]


def describe_backbone(model) -> str:
    backbone = model.backbone
    if hasattr(backbone, 'record'):
        return backbone.record().describe()
    return type(backbone).__name__
