"""Runner construction shared by tools/train.py and tools/test.py."""
import os

from mmengine.registry import RUNNERS
from mmengine.runner import Runner

import hetdpt_mm  # noqa: F401  registers modules and the safe loader
from .checkpoint import TRUST_ENV


def trust_checkpoints() -> None:
    """Explicit opt-in to full-pickle checkpoint loading (this process and
    the processes it starts)."""
    os.environ[TRUST_ENV] = '1'


def build_runner(cfg) -> Runner:
    if 'runner_type' in cfg:
        return RUNNERS.build(cfg)
    return Runner.from_cfg(cfg)
