"""A fair timing loop.

Timing is done in one process with every model measured once per repeat in
a rotating order, so that a change of machine load during the run hits all
models alike; medians over repeats are reported with their spread, and
speedups also per repeat (paired), which cancels most of the load drift.
"""

import contextlib
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Sequence, Tuple, Union

import torch
from mmengine.logging import print_log


@dataclass
class TimingStats:
    """Seconds per batch of each repeat, and summaries of them."""

    seconds: List[float]
    batch_size: int

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def quartiles(self) -> Tuple[float, float]:
        if len(self.seconds) < 2:
            return self.seconds[0], self.seconds[0]
        q1, _, q3 = statistics.quantiles(self.seconds, n=4, method='inclusive')
        return q1, q3

    @property
    def throughput(self) -> float:
        """Images per second at the median batch time."""
        return self.batch_size / self.median

    def to_dict(self) -> Dict[str, Any]:
        q1, q3 = self.quartiles
        return dict(
            batch_size=self.batch_size,
            seconds=self.seconds,
            median_ms=1e3 * self.median,
            min_ms=1e3 * min(self.seconds),
            max_ms=1e3 * max(self.seconds),
            q1_ms=1e3 * q1,
            q3_ms=1e3 * q3,
            throughput=self.throughput,
        )


def synchronize(device: Union[str, torch.device]) -> None:
    """Wait for queued kernels, so that a clock read covers them."""
    if torch.device(device).type == 'cuda':
        torch.cuda.synchronize(device)


def autocast(device: Union[str, torch.device], dtype: str):
    """The precision context: ``'fp32'`` (none) or AMP in ``'bf16'`` or
    ``'fp16'`` (weights stay fp32, matmuls run in the low precision)."""
    if dtype == 'fp32':
        return contextlib.nullcontext()
    low = {'bf16': torch.bfloat16, 'fp16': torch.float16}.get(dtype)
    if low is None:
        raise ValueError(f'unknown dtype {dtype!r}; use fp32, bf16 or fp16')
    return torch.autocast(device_type=torch.device(device).type, dtype=low)


def rotations(names: Sequence[str], repeats: int) -> List[List[str]]:
    """The measuring order of each repeat: ``names`` rotated by one each
    time, so every model runs first (and after every other) equally often."""
    names = list(names)
    return [
        names[r % len(names) :] + names[: r % len(names)]
        for r in range(repeats)
    ]


#: Clocks :func:`time_runs` can read: elapsed time, or the CPU time of this
#: process (all its threads), which waiting for a busy CPU does not add to.
CLOCKS = {'wall': time.perf_counter, 'process': time.process_time}


def time_runs(
    runs: Mapping[str, Callable[[], Any]],
    batch_size: int,
    repeats: int = 5,
    warmup: int = 1,
    iters: int = 1,
    device: Union[str, torch.device] = 'cpu',
    dtype: str = 'fp32',
    clock: str = 'wall',
    logger: str = 'current',
) -> Dict[str, TimingStats]:
    """Time each callable (one batch per call) in alternating order.

    Every repeat measures each run once as the mean of ``iters`` calls,
    after ``warmup`` untimed calls of every run. Runs execute under
    ``torch.inference_mode`` and the :func:`autocast` of ``dtype``; on CUDA
    the clock is read only after :func:`synchronize`. ``clock='process'``
    (CPU only) counts the CPU seconds of this process instead of elapsed
    time: on a shared machine, with one thread, that is the work itself
    without the time spent waiting for a core.
    """
    now = CLOCKS[clock]
    seconds: Dict[str, List[float]] = {name: [] for name in runs}
    with torch.inference_mode(), autocast(device, dtype):
        for order in rotations(runs, warmup):
            for name in order:
                runs[name]()
        for repeat, order in enumerate(rotations(runs, repeats)):
            for name in order:
                synchronize(device)
                start = now()
                for _ in range(iters):
                    runs[name]()
                synchronize(device)
                seconds[name].append((now() - start) / iters)
            print_log(
                f'repeat {repeat + 1}/{repeats}: '
                + ', '.join(
                    f'{name} {1e3 * seconds[name][-1]:.1f} ms'
                    for name in order
                ),
                logger=logger,
            )
    return {
        name: TimingStats(values, batch_size)
        for name, values in seconds.items()
    }


def amdahl_bound(share: float, part_speedup: float) -> float:
    """Overall speedup when a part taking ``share`` of the time gets
    ``part_speedup`` faster and the rest is unchanged."""
    if not 0 <= share <= 1:
        raise ValueError(f'share must be in [0, 1], got {share}')
    return 1 / ((1 - share) + share / part_speedup)
