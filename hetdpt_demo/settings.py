"""The demo's settings (full and ``--quick``), its configs and its saved
state (``demo_state.json``: the settings and the finished stages, checked
once where it is read)."""

import dataclasses
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from hetdpt_mm.errors import UsageError
from hetdpt_mm.fileio import read_json_file

#: The configs the demo runs (their recipes are the full demo's; --quick
#: shortens them with --cfg-options).
CONFIGS = dict(
    dense='configs/demo/vit-demo_shapes.py',
    map='configs/demo/vit-demo_shapes_map.py',
    prune='configs/demo/vit-demo_shapes_hetdpt.py',
    detr='configs/demo/detr_hetdpt_shapes.py',
    upernet='configs/demo/upernet_hetdpt_shapes.py',
)
DEFAULT_DATA_ROOT = 'data/demo'
MAP_SCHEDULES = ('attn', 'act', 'interleaved')
STATE_FILE = 'demo_state.json'
STATE_VERSION = 9  # raised whenever the state's form changes
#: What a demo run makes in its work dir: a new run replaces these (only
#: in a work dir whose state file is a demo state) and nothing else.
OUTPUTS = (
    'dense map splits merged detr upernet benchmark fig8 logs report.md '
    f'summary.json splits.png fig8.png demo.log {STATE_FILE}'
).split()
#: Characters MMEngine's --cfg-options parser drops or splits at: a path
#: holding one cannot be passed to the tools.
UNSAFE_PATH_CHARACTERS = set(' \t\n,\'"[]()=')


@dataclasses.dataclass(frozen=True)
class Settings:
    """What differs between the full demo and ``--quick``: the configs'
    recipes are the full demo's, ``options`` shorten them."""

    budget: int  # layers removed in total (MAP splits it)
    seeds: Tuple[int, ...]  # prune runs of every compared split, each
    finetune_epochs: int  # after a prune run's last removal
    map_steps: int  # removals per MAP schedule
    map_interval: int  # fine-tuning epochs per MAP step
    #: --cfg-options per config (CONFIGS' keys; test: tools/test.py of a
    #: classifier) shortening its recipe
    options: Dict[str, Tuple[str, ...]]
    tome_r: Tuple[int, ...]  # Fig. 8: ToMe's r per block
    gtp_num_prop: Tuple[int, ...]  # Fig. 8: GTP-ViT's patches per block
    gtp_graph: str  # Fig. 8: GTP-ViT's patch graph (docs/user_guides/demo.md)
    bench_batch: int
    bench_repeats: int

    @property
    def fig8_points(self) -> List[Tuple[str, int]]:
        """Fig. 8's (method, value) settings."""
        tome = [('tome', r) for r in self.tome_r]
        return tome + [('gtp', n) for n in self.gtp_num_prop]


FULL = Settings(
    budget=5,
    seeds=(0, 1, 2),
    finetune_epochs=2,
    map_steps=5,
    map_interval=1,
    options={},
    tome_r=(6, 8, 10),
    gtp_num_prop=(4, 6, 8),
    gtp_graph='spatial',
    bench_batch=64,
    bench_repeats=21,
)
SMALL_VAL = (
    'val_dataloader.dataset.indices=200 test_dataloader.dataset.indices=200'
)
LOG_EVERY_ITER = 'default_hooks.logger.interval=1'
QUICK = Settings(
    budget=2,
    seeds=(0,),
    finetune_epochs=1,
    map_steps=2,
    map_interval=1,
    options={
        key: tuple(options.split())
        for key, options in dict(
            dense=f'train_cfg.max_epochs=2 train_cfg.val_interval=2 '
            f'train_dataloader.dataset.indices=256 {SMALL_VAL}',
            map='train_dataloader.sampler.subset=64 '
            f'custom_hooks.0.calib_images=64 {SMALL_VAL}',
            prune=f'train_dataloader.dataset.indices=128 {SMALL_VAL}',
            test=SMALL_VAL,
            detr=f'{LOG_EVERY_ITER} train_cfg.max_epochs=1 '
            'train_cfg.val_interval=1 train_dataloader.dataset.indices=16 '
            'val_dataloader.dataset.indices=16 '
            'test_dataloader.dataset.indices=16',
            upernet=f'{LOG_EVERY_ITER} train_cfg.max_iters=4 '
            'train_cfg.val_interval=4',
        ).items()
    },
    tome_r=(4,),
    gtp_num_prop=(4,),
    gtp_graph='spatial',
    bench_batch=16,
    bench_repeats=2,
)
#: Seeds of --all-splits when --seeds is not given.
ALL_SPLITS_SEEDS = (0, 1, 2, 3, 4)


@dataclasses.dataclass(frozen=True)
class DemoOptions:
    """One demo run as ``tools/demo.py`` was asked for it."""

    repo: Path  # the checkout whose tools and configs the jobs run
    work_dir: Path
    data_root: Path
    quick: bool = False
    budget: Optional[int] = None  # None: the variant's
    seeds: Optional[Tuple[int, ...]] = None  # None: the variant's
    all_splits: bool = False  # every split of the budget, not only four
    jobs: int = 1
    threads: Optional[int] = None  # per job; None: the cores shared out
    resume: bool = False
    command: str = ''  # how it was started, for the report

    @property
    def settings(self) -> Settings:
        variant = QUICK if self.quick else FULL
        seeds = self.seeds or (
            ALL_SPLITS_SEEDS if self.all_splits else variant.seeds
        )
        return dataclasses.replace(
            variant, budget=self.budget or variant.budget, seeds=seeds
        )

    def state_settings(self) -> Dict[str, Any]:
        """The settings a resumed run must share (as JSON keeps them)."""
        return dict(
            quick=self.quick,
            data_root=str(self.data_root),
            budget=self.settings.budget,
            seeds=list(self.settings.seeds),
            all_splits=self.all_splits,
        )


def check_path(path: Path, option: str) -> None:
    bad = sorted(UNSAFE_PATH_CHARACTERS & set(str(path)))
    if bad:
        raise UsageError(
            f'{option} {str(path)!r} holds {"".join(bad)!r}, which the '
            "tools' --cfg-options cannot pass on: choose a path without it"
        )


def read_state(path: Path, stages) -> Dict[str, Any]:
    """The state an earlier run saved at ``path``, checked whole: any
    problem is a ``ValueError`` naming it, before anything runs."""
    state = read_json_file(path, 'demo state')
    problem = None
    keys = {'version', 'settings', 'finished', 'seconds', 'commands'}
    if not isinstance(state, dict) or set(state) != keys:
        problem = f'it is not an object with the keys {sorted(keys)}'
    elif state['version'] != STATE_VERSION:
        problem = f'it is of version {state["version"]!r}, not {STATE_VERSION}'
    elif not isinstance(state['settings'], dict):
        problem = '"settings" is not an object'
    elif not isinstance(state['finished'], list) or (
        state['finished'] != list(stages)[: len(state['finished'])]
    ):
        problem = f'"finished" is not the first of the stages {list(stages)}'
    elif not isinstance(state['seconds'], dict) or not all(
        name in state['finished']
        and isinstance(value, list)
        and len(value) == 2
        and all(type(number) in (int, float) for number in value)
        for name, value in state['seconds'].items()
    ):
        problem = '"seconds" is not [wall, CPU] seconds of finished stages'
    elif not isinstance(state['commands'], list) or not all(
        isinstance(command, str) for command in state['commands']
    ):
        problem = '"commands" is not a list of strings'
    if problem is not None:
        raise ValueError(
            f'demo state {path} is malformed: {problem}; delete it to start '
            'over'
        )
    return state
