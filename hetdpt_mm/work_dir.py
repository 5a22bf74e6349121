"""A run's work dir: never over an input, locked while training, and not
mixed with an earlier run's checkpoints."""

import contextlib
import fcntl
import os
import os.path as osp
import re
import time
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

from mmengine.registry import HOOKS

from .errors import UsageError
from .fileio import check_output_paths, same_file
from .registry import named_arguments, unexpected_keywords_message

#: Files a run writes into its work dir besides the config dump and the
#: timestamped log folder (MMEngine's CheckpointHook, our merge hook).
RUN_OUTPUT_NAMES = re.compile(
    r'^((epoch|iter)_\d+\.pth|best_.*\.pth|last_checkpoint|.*_merged\.pth)$'
)
#: The file a training run holds locked in its work dir.
TRAIN_LOCK_NAME = '.hetdpt_train.lock'
#: A process's rank per launcher before the process group exists.
RANK_VARIABLES = dict(
    pytorch='RANK', slurm='SLURM_PROCID', mpi='OMPI_COMM_WORLD_RANK'
)


def config_strings(node, key: str = '') -> Iterator[Tuple[str, str]]:
    """Every string value of a config with its dotted key."""
    if isinstance(node, dict):
        for name, value in node.items():
            yield from config_strings(value, f'{key}.{name}' if key else name)
    elif isinstance(node, (list, tuple)):
        for index, value in enumerate(node):
            yield from config_strings(value, f'{key}[{index}]')
    elif isinstance(node, str):
        yield key, node


def input_files(cfg, config_path: str) -> List[str]:
    """The files a run reads: its config and every file the config names."""
    named = [
        value
        for _, value in config_strings(cfg.to_dict())
        if '://' not in value and osp.isfile(value)
    ]
    return [config_path] + named


def _custom_hooks(cfg) -> Iterator[Tuple[int, dict, Optional[type]]]:
    """Each custom hook's index, config and class (``None``: unknown)."""
    for index, hook in enumerate(cfg.get('custom_hooks') or []):
        kind = hook.get('type')
        yield index, hook, HOOKS.get(kind) if isinstance(kind, str) else kind


def check_custom_hooks(cfg) -> None:
    """Before anything is built: a custom hook's unknown key, named with
    the hook and its closest key (Python's own error names neither), and
    two hooks that would keep one state in the checkpoints."""
    states = {}
    for index, hook, cls in _custom_hooks(cfg):
        valid = named_arguments(cls) if isinstance(cls, type) else None
        unknown = set(hook) - {'type', 'priority'} - (valid or set(hook))
        if unknown:
            raise TypeError(
                f'custom_hooks.{index}: '
                + unexpected_keywords_message(cls.__name__, unknown, valid)
            )
        state = getattr(cls, 'STATE_KEY', None)
        if state is not None and states.setdefault(state, index) != index:
            raise ValueError(
                f'custom_hooks.{index} is a second {cls.__name__}; two would '
                f"keep one state in the checkpoints (meta['{state}']): "
                'give one'
            )


def hook_outputs(cfg, config_path: str) -> List[str]:
    """The files the config's custom hooks write (their
    ``output_files``)."""
    outputs = []
    for _, hook, cls in _custom_hooks(cfg):
        if hasattr(cls, 'output_files'):
            args = {
                k: v for k, v in hook.items() if k not in ('type', 'priority')
            }
            outputs += cls(**args).output_files(cfg.work_dir, config_path)
    return outputs


def check_work_dir(
    cfg,
    config_path: str,
    resume_from: Optional[str] = None,
    training: bool = False,
) -> None:
    """Refuse a work dir where the run's config dump or checkpoints would
    replace an input (but the checkpoint it resumes); ``training``: also
    where its custom hooks' outputs would (a test runs none)."""
    work_dir = Path(cfg.work_dir)
    if work_dir.exists() and not work_dir.is_dir():
        raise UsageError(f'work dir {work_dir} is a file, not a directory')
    config_dump = work_dir / osp.basename(config_path)
    for path in input_files(cfg, config_path):
        if resume_from is not None and same_file(path, resume_from):
            continue
        if same_file(path, config_dump):
            raise UsageError(
                f'{path} is an input of this run, and MMEngine writes the '
                f'config it runs to {config_dump}; choose another --work-dir'
            )
        if same_file(Path(path).parent, work_dir) and RUN_OUTPUT_NAMES.match(
            Path(path).name
        ):
            raise UsageError(
                f'{path} is an input of this run, and the run saves files '
                f'of that name into its work dir {work_dir}; move the file or '
                'choose another --work-dir'
            )
    if training:
        check_custom_hooks(cfg)
        check_output_paths(
            hook_outputs(cfg, config_path),
            input_files(cfg, config_path),
            force=True,
        )


def check_not_run_file(path) -> None:
    """Refuse an output that would replace a training run's checkpoint or
    config dump."""
    path = Path(path)
    if path.is_file() and (
        RUN_OUTPUT_NAMES.match(path.name)
        or (path.suffix == '.py' and run_checkpoints(path.parent))
    ):
        raise UsageError(
            f'output {path} is a file of the training run in {path.parent}; '
            'choose another path'
        )


def job_rank(launcher: str) -> int:
    """This process's rank in its job (0 without a launcher)."""
    variable = RANK_VARIABLES.get(launcher)
    return int(os.environ.get(variable, 0)) if variable else 0


@contextlib.contextmanager
def work_dir_lock(work_dir) -> Iterator[None]:
    """Hold the training lock of ``work_dir``, or name its holder: a
    ``flock`` the OS drops when its holder ends, so never stale, on a file
    removed when the run ends."""
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    path = work_dir / TRAIN_LOCK_NAME
    with open(path, 'a+') as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read(200).strip() or 'its pid not written yet'
            raise UsageError(
                f'work dir {work_dir} is in use by another training run '
                f'({holder}); wait for it to end or choose another '
                '--work-dir'
            ) from None
        if not os.fstat(lock.fileno()).st_nlink:
            # Locked as the run holding it removed it at its end: lock anew.
            fcntl.flock(lock, fcntl.LOCK_UN)
            with work_dir_lock(work_dir):
                yield
            return
        try:
            lock.truncate(0)
            lock.write(
                f'pid {os.getpid()}, since '
                f'{time.strftime("%Y-%m-%d %H:%M:%S")}\n'
            )
            lock.flush()
            yield
        finally:
            # Removed while held (a run that opened it meanwhile finds it
            # unlinked); the forked data-loader workers share the lock, and
            # unlocking drops it for them too.
            path.unlink(missing_ok=True)
            fcntl.flock(lock, fcntl.LOCK_UN)


def run_checkpoints(work_dir) -> List[Path]:
    """The checkpoints a run saved in ``work_dir``, in numeric order."""
    work_dir = Path(work_dir)
    if not work_dir.is_dir():
        return []
    return sorted(
        (
            path
            for path in work_dir.iterdir()
            if RUN_OUTPUT_NAMES.match(path.name)
        ),
        key=lambda path: [
            int(part) if part.isdigit() else part
            for part in re.split(r'(\d+)', path.name)
        ],
    )


@contextlib.contextmanager
def claim_work_dir(cfg, resume: bool, overwrite: bool) -> Iterator[None]:
    """Keep the work dir to this run while it trains: no run training there,
    and without ``resume`` no earlier run's checkpoints (``overwrite``
    removes them); rank 0 holds the lock for its job."""
    rank = job_rank(cfg.get('launcher', 'none'))
    with (
        work_dir_lock(cfg.work_dir) if rank == 0 else contextlib.nullcontext()
    ):
        previous = [] if resume else run_checkpoints(cfg.work_dir)
        if previous and not overwrite:
            names = ', '.join(path.name for path in previous[:3]) + (
                f', ... ({len(previous)} in all)' if len(previous) > 3 else ''
            )
            raise UsageError(
                f'work dir {cfg.work_dir} already holds checkpoints of a run '
                f'({names}); pass --resume to continue it, --overwrite to '
                'start over, or choose another --work-dir'
            )
        if rank == 0:
            for path in previous:
                path.unlink()
        yield
