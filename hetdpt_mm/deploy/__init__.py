"""Deployment: ONNX export of HetDPT models (classifier, backbone, DETR,
UperNet) verified against PyTorch, and the ONNX Runtime / OpenVINO runtimes
that ``tools/benchmark.py --runtime`` times. Needs the ``deploy`` extra
(requirements/deploy.txt); see docs/user_guides/deploy.md."""

from .export import ExportOptions, VerificationError, run_export
from .networks import TASKS, build_network, exportable, load_model
from .runtimes import OPSET, RUNTIMES, export_onnx, make_session

__all__ = [
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
