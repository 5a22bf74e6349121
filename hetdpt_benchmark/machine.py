"""The machine a measurement runs on: what it is, and glibc's malloc
tuned so that batches do not page-fault their tensors in again."""

import ctypes
import os
import platform
from typing import Any, Dict, Union

import torch

#: glibc's mallopt parameters (malloc.h).
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4


def glibc_malloc() -> bool:
    """Whether this Python allocates through glibc's malloc."""
    return platform.libc_ver()[0] == 'glibc'


def keep_freed_memory() -> None:
    """Make glibc's malloc serve every allocation from its heap and keep
    freed memory instead of returning it to the OS.

    By default glibc maps each block above 32 MB (a batch's activations)
    fresh and unmaps it when freed, so every batch page-faults its largest
    tensors in again: kernel time that grows with the activations, not with
    the model's work, and that a pruned model pays in full for the layers it
    keeps.  jemalloc and tcmalloc, which PyTorch's CPU performance guide
    recommends for inference, do not.
    """
    if not glibc_malloc():
        raise RuntimeError("keeping freed memory needs glibc's malloc")
    libc = ctypes.CDLL(None)
    if not (
        libc.mallopt(M_MMAP_MAX, 0)
        and libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1)
    ):
        raise RuntimeError(
            'glibc refused mallopt(M_MMAP_MAX / M_TRIM_THRESHOLD)'
        )


def machine_info(device: Union[str, torch.device] = 'cpu') -> Dict[str, Any]:
    """What the numbers were measured on."""
    cpu = platform.processor() or platform.machine()
    try:
        with open('/proc/cpuinfo') as file:
            for line in file:
                if line.startswith('model name'):
                    cpu = line.split(':', 1)[1].strip()
                    break
    except OSError:
        pass
    info = dict(
        cpu=cpu,
        logical_cores=os.cpu_count(),
        torch=torch.__version__,
        threads=torch.get_num_threads(),
        device=str(device),
    )
    if hasattr(os, 'getloadavg'):
        info['loadavg'] = [round(v, 2) for v in os.getloadavg()]
    if torch.device(device).type == 'cuda':
        info['gpu'] = torch.cuda.get_device_name(device)
        info['tf32_matmul'] = torch.backends.cuda.matmul.allow_tf32
    return info
