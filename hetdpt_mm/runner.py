"""Runner construction shared by tools/train.py and tools/test.py."""
import os

import torch
from mmengine.registry import RUNNERS
from mmengine.runner import Runner

import hetdpt_mm  # noqa: F401  registers modules and the safe loader
from .checkpoint import TRUST_ENV


def trust_checkpoints() -> None:
    """Explicit opt-in to full-pickle checkpoint loading (this process and
    the processes it starts)."""
    os.environ[TRUST_ENV] = '1'


def prepare_cpu_distributed(cfg) -> None:
    """MMEngine's ``pytorch`` launcher calls ``torch.cuda.set_device`` and
    gives DDP ``device_ids``; neither works without CUDA.  On a CPU-only
    machine start the (gloo) process group here, which MMEngine then reuses,
    and build DDP without ``device_ids``, so tools/dist_train.sh runs."""
    if cfg.get('launcher', 'none') != 'pytorch' or torch.cuda.is_available():
        return
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group(backend='gloo')
    wrapper = cfg.get('model_wrapper_cfg') or dict(
        type='MMDistributedDataParallel', broadcast_buffers=False,
        find_unused_parameters=cfg.get('find_unused_parameters', False))
    wrapper['device_ids'] = None
    cfg.model_wrapper_cfg = wrapper


def build_runner(cfg) -> Runner:
    prepare_cpu_distributed(cfg)
    if 'runner_type' in cfg:
        return RUNNERS.build(cfg)
    return Runner.from_cfg(cfg)
