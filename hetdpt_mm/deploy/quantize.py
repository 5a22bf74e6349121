"""Static post-training INT8 quantization of an exported FP32 graph, in
ONNX Runtime (QDQ) and in OpenVINO (NNCF): what ``tools/export.py --int8``
and ``tools/benchmark.py --runtime onnxruntime-int8 openvino-int8`` run.

Only the matrix products (``MatMul``, ``Gemm``, ``Conv``) are quantized;
LayerNorm, softmax, GELU and the residual additions stay FP32. Of the
products, the groups of :data:`FP32_GROUPS` named in ``keep_fp32`` stay FP32
as well, found by the module each node was exported from (the dynamo
exporter records it in the node's ``namespace`` metadata). The defaults and
the measurements behind them: docs/user_guides/deploy.md.

* ONNX Runtime: QDQ format, weights int8 symmetric per output channel,
  activations uint8 asymmetric per tensor (U8S8, the fast kernels on x86
  with VNNI), ranges from :data:`CALIBRATION_METHODS`.
* OpenVINO: ``nncf.quantize`` with ``ModelType.TRANSFORMER`` (its mixed
  preset: asymmetric activations; SmoothQuant on the products), the result
  saved as an IR (``.xml`` and ``.bin``) in FP32 where not quantized.
"""

import logging
import re
from pathlib import Path
from typing import Callable, Dict, List, Sequence, Tuple, Union

import numpy as np

from ..cli import require_extra

#: The products that are quantized.
QUANTIZED_OPS = ('MatMul', 'Gemm', 'Conv')
#: Where each quantizer writes: the file an INT8 graph is read from.
INT8_SUFFIXES = {'onnxruntime': '.onnx', 'openvino': '.xml'}
#: ONNX Runtime's ways of turning calibration activations into ranges:
#: ``minmax`` their extremes, ``percentile`` the 99.999th percentile of
#: their absolute values (outliers clipped).
CALIBRATION_METHODS = ('minmax', 'percentile')
#: What ``scope`` quantizes: the whole network, or its backbone alone (the
#: neck and heads of a detector or segmentor stay FP32).
SCOPES = ('network', 'backbone')


def _patch_embed(node, modules, constants) -> bool:
    return any(path.rpartition('.')[2] == 'patch_embed' for path, _ in modules)


def _attention_products(node, modules, constants) -> bool:
    # Both operands are activations: q k^T and the weights times v.
    return node.op_type == 'MatMul' and not constants.intersection(node.input)


def _merged_ffn(node, modules, constants) -> bool:
    return any(kind.endswith('.MergedFFN') for _, kind in modules)


#: Products that can stay FP32, by name: the patch embedding (the one
#: convolution, on the normalised image), the two activation x activation
#: products of every attention, and the single ``D x D`` linear a merged
#: block has in place of its FFN when its GELU was removed.
FP32_GROUPS = {
    'patch_embed': _patch_embed,
    'attention_products': _attention_products,
    'merged_ffn': _merged_ffn,
}
#: The groups kept FP32 unless asked otherwise (chosen by measurement:
#: docs/user_guides/deploy.md#int8).
DEFAULT_KEEP_FP32 = ('attention_products',)


def node_modules(node) -> List[Tuple[str, str]]:
    """``(path, class)`` of the modules ``node`` was exported from,
    outermost first; the last entry is the traced operation itself."""
    for prop in node.metadata_props:
        if prop.key == 'namespace':
            return [
                tuple(part.split(': ', 1)) for part in prop.value.split('/')
            ]
    return []


def fp32_nodes(
    graph, keep_fp32: Sequence[str] = DEFAULT_KEEP_FP32, scope: str = 'network'
) -> List[str]:
    """The names of the products of ``graph`` (an ``onnx.ModelProto``) that
    stay FP32: those of the groups ``keep_fp32`` and, with ``scope=
    'backbone'``, every one outside the module named ``backbone``."""
    constants = {tensor.name for tensor in graph.graph.initializer}
    constants.update(
        out
        for n in graph.graph.node
        if n.op_type == 'Constant'
        for out in n.output
    )
    kept = []
    for node in graph.graph.node:
        if node.op_type not in QUANTIZED_OPS:
            continue
        modules = node_modules(node)[:-1]
        outside = scope == 'backbone' and not any(
            path.rpartition('.')[2] == 'backbone' for path, _ in modules
        )
        if outside or any(
            FP32_GROUPS[name](node, modules, constants) for name in keep_fp32
        ):
            kept.append(node.name)
    return kept


def quantize_onnxruntime(
    model: Union[str, Path],
    out: Union[str, Path],
    images: Sequence[np.ndarray],
    fp32: Sequence[str],
    method: str = 'minmax',
) -> None:
    """Write the QDQ INT8 graph of the ONNX file ``model`` to ``out``,
    calibrated on ``images`` (normalised NCHW float32 arrays), the products
    named in ``fp32`` left FP32."""
    quantization = require_extra('onnxruntime.quantization', 'deploy')
    methods = dict(
        minmax=quantization.CalibrationMethod.MinMax,
        percentile=quantization.CalibrationMethod.Percentile,
    )

    class Reader(quantization.CalibrationDataReader):
        def __init__(self):
            self.batches = iter(images)

        def get_next(self):
            return next(({'input': batch} for batch in self.batches), None)

    quantization.quantize_static(
        str(model),
        str(out),
        Reader(),
        quant_format=quantization.QuantFormat.QDQ,
        op_types_to_quantize=list(QUANTIZED_OPS),
        per_channel=True,
        activation_type=quantization.QuantType.QUInt8,
        weight_type=quantization.QuantType.QInt8,
        nodes_to_exclude=list(fp32),
        calibrate_method=methods[method],
    )


def quantize_openvino(
    model: Union[str, Path],
    out: Union[str, Path],
    images: Sequence[np.ndarray],
    fp32: Sequence[str],
    method: str = 'minmax',
) -> None:
    """Write the NNCF INT8 IR of the ONNX file ``model`` to ``out``
    (``.xml``, its weights beside it in ``.bin``); ``method`` is ONNX
    Runtime's (NNCF picks its own ranges)."""
    ov = require_extra('openvino', 'deploy')
    nncf = require_extra('nncf', 'deploy')
    # OpenVINO names a product after its ONNX node (a Gemm or Conv with a
    # bias: NAME/WithoutBiases, then the addition).
    ignored = nncf.IgnoredScope(
        patterns=[f'{re.escape(name)}(/WithoutBiases)?$' for name in fp32],
        validate=False,
    )
    # NNCF logs a line per product it leaves FP32.
    logger = logging.getLogger('nncf')
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        quantized = nncf.quantize(
            ov.Core().read_model(str(model)),
            nncf.Dataset(list(images)),
            subset_size=len(images),
            model_type=nncf.ModelType.TRANSFORMER,
            ignored_scope=ignored,
        )
    finally:
        logger.setLevel(level)
    ov.save_model(quantized, str(out), compress_to_fp16=False)


#: The quantizer of each runtime.
QUANTIZERS: Dict[str, Callable] = {
    'onnxruntime': quantize_onnxruntime,
    'openvino': quantize_openvino,
}
