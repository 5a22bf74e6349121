"""ONNX export and the runtimes that run exported models (ONNX Runtime and
OpenVINO, on the CPU), shared by ``tools/export.py`` and
``tools/benchmark.py --runtime``.

Export uses ``torch.onnx.export(..., dynamo=True)`` (torch.export, then
onnxscript) at opset :data:`OPSET`: the TorchScript exporter is deprecated
and specialises Python-level shape logic to the example input, while
torch.export keeps sizes symbolic (dynamic batch, height and width) and
fails loudly where it cannot.
"""

import contextlib
import ctypes
import sys
from pathlib import Path
from typing import Callable, Iterator, List, Sequence, Union

import numpy as np
import torch
import torch.nn as nn

from ..cli import require_extra

#: ONNX opset of every export: the dynamo exporter's own (18) — SDPA,
#: LayerNorm and bicubic Resize need no legacy fallbacks there.
OPSET = 18
#: What runs an exported model.
RUNTIMES = ('onnxruntime', 'openvino')
#: The precisions each runtime runs the fp32 graph in. OpenVINO's CPU
#: plugin runs it in bf16 on CPUs with bf16 instructions (its inference
#: precision hint); ONNX Runtime's CPU provider has no bf16 MatMul kernel.
RUNTIME_DTYPES = {'onnxruntime': ('fp32',), 'openvino': ('fp32', 'bf16')}


class _SignalStack(ctypes.Structure):
    """``stack_t`` of sigaltstack(2) on Linux."""

    _fields_ = [
        ('ss_sp', ctypes.c_void_p),
        ('ss_flags', ctypes.c_int),
        ('ss_size', ctypes.c_size_t),
    ]


@contextlib.contextmanager
def signal_stack_kept() -> Iterator[None]:
    """Give the calling thread back its alternate signal stack afterwards.

    OpenVINO's CPU plugin (2026.4) installs an alternate signal stack on the
    thread that compiles a model and, when that compiled model is freed,
    reinstalls the stack it replaced. With two models freed in the order
    they were compiled, the thread is left with a stack already freed, and
    the next handled signal (SIGCHLD from a subprocess once PyTorch's
    DataLoader has set a handler) kills the process with SIGSEGV.
    """
    if not sys.platform.startswith('linux'):
        yield
        return
    sigaltstack = ctypes.CDLL(None, use_errno=True).sigaltstack
    own = _SignalStack()
    sigaltstack(None, ctypes.byref(own))
    try:
        yield
    finally:
        sigaltstack(ctypes.byref(own), None)


def export_onnx(
    net: nn.Module,
    example: torch.Tensor,
    path: Union[str, Path],
    output_names: Sequence[str],
    dynamic_batch: bool = True,
    dynamic_hw: bool = True,
) -> None:
    """Export ``net(example)`` to ``path`` with input ``'input'``
    (N, C, H, W) and the given output names; the batch, height and width
    axes are dynamic as asked."""
    for name in ('onnx', 'onnxscript'):
        require_extra(name, 'deploy')
    dynamic = torch.export.Dim.DYNAMIC
    axes = {}
    if dynamic_batch:
        axes[0] = dynamic
    if dynamic_hw:
        axes.update({2: dynamic, 3: dynamic})
    with torch.no_grad():
        torch.onnx.export(
            net,
            (example,),
            str(path),
            dynamo=True,
            opset_version=OPSET,
            input_names=['input'],
            output_names=list(output_names),
            dynamic_shapes=(axes,) if axes else None,
            external_data=False,
            verbose=False,
        )


def make_session(
    path: Union[str, Path], runtime: str, threads: int = 0, dtype: str = 'fp32'
) -> Callable[[np.ndarray], List[np.ndarray]]:
    """A function running the ONNX model at ``path`` in ``runtime`` on the
    CPU in ``dtype`` (one of ``RUNTIME_DTYPES[runtime]``; ``threads``
    intra-op threads, 0: the runtime's default): one NCHW float32 array
    in, the list of outputs out (the tools' command lines check
    ``runtime`` and ``dtype``)."""
    if runtime == 'onnxruntime':
        ort = require_extra('onnxruntime', 'deploy')
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.log_severity_level = 3
        session = ort.InferenceSession(
            str(path), options, providers=['CPUExecutionProvider']
        )
        name = session.get_inputs()[0].name
        return lambda array: session.run(None, {name: array})
    ov = require_extra('openvino', 'deploy')
    precision = {'fp32': 'f32', 'bf16': 'bf16'}[dtype]
    config = {'INFERENCE_PRECISION_HINT': precision}
    if threads:
        config['INFERENCE_NUM_THREADS'] = threads
    with signal_stack_kept():
        compiled = ov.Core().compile_model(str(path), 'CPU', config)
    # A hint the CPU cannot follow is not an error to the plugin.
    used = compiled.get_property('INFERENCE_PRECISION_HINT').get_type_name()
    if used != precision:
        raise ValueError(f'OpenVINO runs {used} on this CPU, not {precision}')
    request = compiled.create_infer_request()

    def run(array):
        results = request.infer([array], share_inputs=True)
        return [np.asarray(results[out]) for out in compiled.outputs]

    return run
