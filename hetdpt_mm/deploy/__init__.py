"""Deployment: ONNX export of HetDPT models (classifier, backbone, DETR,
UperNet) verified against PyTorch, their INT8 quantization verified with the
config's metric, and the ONNX Runtime / OpenVINO runtimes that
``tools/benchmark.py --runtime`` times. Needs the ``deploy`` extra
(requirements/deploy.txt); see docs/user_guides/deploy.md."""

from ..errors import VerificationError
from .evaluate import DeployedModel, evaluate
from .export import ExportOptions, run_export
from .networks import TASKS, build_network, exportable, load_model
from .quantize import QUANTIZERS, fp32_nodes
from .runtimes import OPSET, RUNTIMES, export_onnx, make_session

__all__ = [
    'DeployedModel',
    'evaluate',
    'QUANTIZERS',
    'fp32_nodes',
    'ExportOptions',
    'VerificationError',
    'run_export',
    'TASKS',
    'build_network',
    'exportable',
    'load_model',
    'OPSET',
    'RUNTIMES',
    'export_onnx',
    'make_session',
]
