"""A backbone run in each runtime the benchmark compares: PyTorch eager,
``torch.compile`` and the ONNX runtimes of :mod:`hetdpt_mm.deploy`, FP32 or
INT8, its outputs checked against PyTorch eager in fp32 before it is
timed."""

from pathlib import Path
from typing import Any, Callable, Sequence, Tuple, Union

import numpy as np
import torch
import torch.nn as nn

from hetdpt_mm.deploy.quantize import INT8_SUFFIXES, QUANTIZERS, fp32_nodes
from hetdpt_mm.deploy.runtimes import RUNTIMES, export_onnx, make_session

from .timing import autocast

#: Largest absolute output difference from fp32 PyTorch eager accepted, by
#: precision: fp32 runtimes differ by rounding (~1e-6 on DeiT-B), bf16
#: (8-bit mantissa) by ~3e-2 there.
TOLERANCES = {'fp32': 1e-4, 'bf16': 1e-1, 'fp16': 1e-1}
#: INT8 graphs are checked by their relative error instead, |got - expected|
#: / |expected| over all outputs: a graph with wrong weights or wiring is
#: near 1 or above; INT8 rounding gave at most 0.054 on DeiT-B with random
#: weights.
INT8_RELATIVE_TOLERANCE = 0.3
#: A runtime's INT8 graph (hetdpt_mm.deploy.quantize): ``onnxruntime-int8``.
INT8 = '-int8'
#: What ``tools/benchmark.py --runtime`` runs a backbone in: PyTorch eager,
#: ``torch.compile`` (inductor), and the ONNX runtimes, FP32 and INT8.
BENCHMARK_RUNTIMES = (
    ('torch', 'compile') + RUNTIMES + tuple(r + INT8 for r in RUNTIMES)
)


def runtime_name(variant: str, runtime: str) -> str:
    """How the tables name a model run in a runtime."""
    return variant if runtime == 'torch' else f'{variant}@{runtime}'


def benchmark_runner(
    model: nn.Module,
    images: torch.Tensor,
    runtime: str,
    workdir: Union[str, Path],
    name: str,
    dtype: str = 'fp32',
) -> Tuple[Callable[[], Any], float]:
    """A call running ``model(images)`` in ``runtime`` at ``dtype``
    (``images`` fixed, as a benchmark times it; torch and compile run it
    under the benchmark's AMP context) and the largest absolute difference
    of its outputs from PyTorch eager's in fp32, checked against
    ``TOLERANCES[dtype]``. The ONNX runtimes get a graph exported at
    exactly this input shape (static shapes: the most their graph
    optimisers can do), with PyTorch's number of threads; their INT8
    forms (``onnxruntime-int8``) that graph quantized with the defaults of
    ``tools/export.py --int8``, calibrated on ``images`` (speed does not
    depend on the ranges), its other operations in fp32."""
    if runtime == 'torch' and dtype == 'fp32':  # the reference itself
        return (lambda: model(images)), 0.0
    with torch.inference_mode():
        expected = torch.utils._pytree.tree_leaves(model(images))
    if runtime in ('torch', 'compile'):
        run = torch.compile(model) if runtime == 'compile' else model
        # compile compiles here, for this precision, not in the timing.
        with torch.inference_mode(), autocast(images.device, dtype):
            got = torch.utils._pytree.tree_leaves(run(images))
        return (lambda: run(images)), checked_diff(
            got, expected, runtime, name, dtype
        )
    path = Path(workdir) / f'{name}.onnx'
    if not path.exists():
        count = len(expected)
        export_onnx(
            model,
            images,
            path,
            [f'out{i}' for i in range(count)],
            dynamic_batch=False,
            dynamic_hw=False,
        )
    array = images.cpu().numpy()
    if runtime.endswith(INT8):
        runtime = runtime[: -len(INT8)]
        int8 = path.with_name(f'{name}.int8{INT8_SUFFIXES[runtime]}')
        import onnx

        QUANTIZERS[runtime](path, int8, [array], fp32_nodes(onnx.load(path)))
        path, dtype = int8, 'int8'
    run = make_session(
        path,
        runtime,
        torch.get_num_threads(),
        'fp32' if dtype == 'int8' else dtype,
    )
    got = [torch.from_numpy(np.asarray(out)) for out in run(array)]
    return (lambda: run(array)), checked_diff(
        got, expected, runtime, name, dtype
    )


def checked_diff(
    got: Sequence[torch.Tensor],
    expected: Sequence[torch.Tensor],
    runtime: str,
    name: str,
    dtype: str,
) -> float:
    """The largest absolute difference, or ``ValueError`` above
    ``TOLERANCES[dtype]`` (for ``'int8'``: a relative error above
    ``INT8_RELATIVE_TOLERANCE``): a wrong graph's speed means nothing."""
    # np.max, not max(): a NaN in any output is the maximum.
    diff = float(
        np.max(
            [
                float((g.float() - e.float()).abs().max())
                for g, e in zip(got, expected)
            ]
        )
    )
    if dtype == 'int8':
        error = relative_error(got, expected)
        if not error <= INT8_RELATIVE_TOLERANCE:
            raise ValueError(
                f'{name} in {runtime} (int8) differs from PyTorch eager in '
                f'fp32 by {error:.3g} of its outputs, more than '
                f'{INT8_RELATIVE_TOLERANCE:g}'
            )
        return diff
    if not diff <= TOLERANCES[dtype]:
        raise ValueError(
            f'{name} in {runtime} ({dtype}) differs from '
            f'PyTorch eager in fp32 by {diff:.3g}, more than '
            f'{TOLERANCES[dtype]:g}'
        )
    return diff


def relative_error(
    got: Sequence[torch.Tensor], expected: Sequence[torch.Tensor]
) -> float:
    """``|got - expected| / |expected|`` (L2 norms over all outputs)."""
    return float(
        sum(
            (g.float() - e.float()).square().sum()
            for g, e in zip(got, expected)
        ).sqrt()
        / sum(e.float().square().sum() for e in expected).sqrt()
    )
