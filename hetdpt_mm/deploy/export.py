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
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from ..cli import UsageError
from ..fileio import atomic_path, check_input_file, check_output_path
from .networks import (
    TASKS,
    build_network,
    exportable,
    load_model,
    output_names,
)
from .runtimes import OPSET, RUNTIMES, export_onnx, make_session

__all__ = ['ExportOptions', 'VerificationError', 'run_export']

#: The backbones' token reductions, and what each does to the tokens.
TOKEN_REDUCTIONS = {'token_merge': 'merges', 'graph_propagation': 'propagates'}


class VerificationError(Exception):
    """The exported graph does not compute what the PyTorch model does."""


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


def check_options(options: ExportOptions) -> None:
    if options.task not in TASKS:
        raise UsageError(
            f'unknown task {options.task!r}; choose from {list(TASKS)}'
        )
    for name in ('config', 'checkpoint'):
        check_input_file(getattr(options, name), name)
    unknown = [r for r in options.runtimes if r not in RUNTIMES]
    if unknown:
        raise UsageError(
            f'unknown runtimes {unknown}; choose from {list(RUNTIMES)}'
        )
    if options.batch_size < 2:
        raise UsageError(
            '--batch-size (of the example input) must be >= 2, '
            'or the exporter fixes the batch axis to 1'
        )
    if min(options.verify_batch_sizes, default=1) < 1:
        raise UsageError('--verify-batch-sizes must be >= 1')
    if options.tolerance <= 0:
        raise UsageError('--tolerance must be > 0')
    check_output_path(
        options.out, [options.config, options.checkpoint], options.force
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
    for size in sizes:
        if len(size) != 2 or min(size) < 1:
            raise UsageError(
                f'sizes are H W with positive H and W, got {list(size)}'
            )
    if options.static_hw:
        fixed = [s for s in sizes if s != sizes[0]]
        if fixed:
            raise UsageError(
                f'--static-hw fixes the input to {sizes[0][0]}x{sizes[0][1]}'
                f'; it cannot be verified at {fixed[0][0]}x{fixed[0][1]}'
            )
    return sizes[0], list(dict.fromkeys(sizes))


def reference_outputs(net, sizes, batch_sizes, seed) -> List[Dict]:
    """Random inputs at every size and batch size with PyTorch's outputs;
    a size the model cannot take raises ``ValueError``."""
    generator = torch.Generator().manual_seed(seed)
    cases = []
    for height, width in sizes:
        for batch in batch_sizes:
            inputs = torch.randn(batch, 3, height, width, generator=generator)
            try:
                with torch.no_grad():
                    outputs = net(inputs)
            except (RuntimeError, ValueError, AssertionError) as err:
                raise ValueError(
                    f'input size {height}x{width} cannot work '
                    f'with this model: {err}'
                ) from None
            outputs = [
                o.numpy() for o in torch.utils._pytree.tree_leaves(outputs)
            ]
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
    model, scope = load_model(
        options.config, options.checkpoint, options.cfg_options
    )
    reducing = [
        (option, verb)
        for option, verb in TOKEN_REDUCTIONS.items()
        if getattr(model.backbone, option, None) is not None
    ]
    if reducing and not options.static_hw:
        # How many tokens each block keeps follows from the number of
        # patches; with symbolic H and W torch.export runs on and on (over
        # 10 minutes for a 4-block model with token merging).
        option, verb = reducing[0]
        raise UsageError(
            f'the backbone {verb} tokens ({option}), and how '
            f'many each block {verb} depends on the input size: '
            'it exports for one height and width only; add '
            '--static-hw (and --img-size H W for another size '
            "than the backbone's; "
            'docs/user_guides/token_merge.md)'
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
    with atomic_path(options.out) as tmp:
        export_onnx(
            exportable(net),
            example,
            tmp,
            names,
            dynamic_hw=not options.static_hw,
        )
        rows = verify(tmp, cases, options.runtimes, options.tolerance)
        print(format_rows(rows, options.tolerance))
        bad = [row for row in rows if not row['ok']]
        if bad:
            worst = max(bad, key=lambda row: row['max_abs_diff'])
            raise VerificationError(
                f'{len(bad)} of {len(rows)} checks differ from PyTorch by '
                f'more than {options.tolerance:g} (worst: '
                f'{worst["max_abs_diff"]:.3g} in {worst["runtime"]} at '
                f'{"x".join(map(str, worst["input"]))}); {options.out} was '
                'not written'
            )
    print(f'wrote {options.out}')
    return rows


def describe_backbone(model) -> str:
    backbone = model.backbone
    if hasattr(backbone, 'record'):
        return backbone.record().describe()
    return type(backbone).__name__
