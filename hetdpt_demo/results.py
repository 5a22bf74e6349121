"""Typed results of the demo's stages (:mod:`hetdpt_demo`) and
their JSON form, the one the state file keeps and ``summary.json`` shows.

Each stage writes its own record into :class:`DemoResults`; the report
(:mod:`.report`) reads them.  :func:`to_json` writes a record as JSON
data (a field marked :data:`OPTIONAL` is left out while it has its default);
:func:`from_json` reads it back and says which entry is malformed.
"""

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Type, TypeVar, Union

#: Field metadata: left out of the JSON form while at its default.
OPTIONAL = dict(optional=True)
T = TypeVar('T')


def unset() -> Any:
    """A field that is ``None`` (and left out of the JSON) until set."""
    return field(default=None, metadata=OPTIONAL)


def json_type(value: Any) -> str:
    """How JSON names the type of a decoded ``value``."""
    if isinstance(value, bool):
        return 'a boolean'
    if isinstance(value, (int, float)):
        return 'a number'
    return {dict: 'an object', list: 'an array', str: 'a string'}.get(
        type(value), 'null'
    )


def to_json(value: Any) -> Any:
    """``value`` (records, and dicts and lists of them) as JSON data."""
    if dataclasses.is_dataclass(value):
        return {
            f.name: to_json(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if not (
                f.metadata.get('optional')
                and getattr(value, f.name) == f.default
            )
        }
    if isinstance(value, dict):
        return {key: to_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(item) for item in value]
    return value


def from_json(kind: Type[T], value: Any, where: str = 'results') -> T:
    """``value`` (JSON data) read as ``kind``, a record or a type hint made
    of them; numbers are kept as they are.  ``ValueError`` names the first
    malformed entry (``where`` is the name of ``value``)."""
    if dataclasses.is_dataclass(kind):
        if not isinstance(value, dict):
            raise ValueError(f'"{where}" is {json_type(value)}, not an object')
        hints = typing.get_type_hints(kind)
        fields = {f.name: f for f in dataclasses.fields(kind)}
        unknown = [key for key in value if key not in fields]
        if unknown:
            raise ValueError(f'"{where}" has an unknown entry, {unknown[0]!r}')
        for name, spec in fields.items():
            if (
                name not in value
                and spec.default is dataclasses.MISSING
                and spec.default_factory is dataclasses.MISSING
            ):
                raise ValueError(f'"{where}" has no "{name}" entry')
        return kind(
            **{
                name: from_json(hints[name], item, f'{where}.{name}')
                for name, item in value.items()
            }
        )
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is Union:
        if value is None and type(None) in args:
            return value
        problem = None
        for arg in (arg for arg in args if arg is not type(None)):
            try:
                return from_json(arg, value, where)
            except ValueError as err:
                problem = err
        raise problem
    if origin is dict:
        if not isinstance(value, dict):
            raise ValueError(f'"{where}" is {json_type(value)}, not an object')
        return {
            key: from_json(args[1], item, f'{where}.{key}')
            for key, item in value.items()
        }
    if origin is list:
        if not isinstance(value, list):
            raise ValueError(f'"{where}" is {json_type(value)}, not an array')
        return [
            from_json(args[0], item, f'{where}[{index}]')
            for index, item in enumerate(value)
        ]
    expected = {
        float: 'a number',
        int: 'a number',
        str: 'a string',
        bool: 'a boolean',
    }.get(kind)
    if expected is not None and json_type(value) != expected:
        raise ValueError(f'"{where}" is {json_type(value)}, not {expected}')
    return value


# ------------------------------------------------------------ the stages
@dataclass
class DenseResult:
    """Stage ``dense``: the dense classifier."""

    checkpoint: str
    arch: Dict[str, Any]  # the build arguments in its meta
    depth: int
    accuracy: float  # its last validation (the test split)


@dataclass
class MapPoints:
    """Stage ``map``: the MAP points of every schedule (CSV rows)."""

    points: List[Dict[str, str]]
    interval: int  # fine-tuning epochs per step


@dataclass
class MapFitResult:
    """Stage ``fit``: the MAP fit and the split of the budget."""

    fit: Dict[str, Any]  # MAPFit.to_dict()
    bounds: str
    fit_path: str
    allocation: Dict[str, Any]  # Allocation.to_dict()


@dataclass
class RecoveryRun:
    """Stage ``recovery``: one layer removed from the dense model."""

    block: int
    at_once: float
    after_epochs: List[float]


@dataclass
class PruneResult:
    """Stage ``prune``: the main run (the MAP split, first seed)."""

    checkpoint: str
    accuracy: float  # last validation, gates closed
    hook_merged: str  # what its MergeCheckpointHook wrote
    spec: Dict[str, Any]  # PruneSpec.to_dict() with n_attn and n_act
    decisions: List[Dict[str, Any]]  # HetDPTPruneHook's
    score_grads: Dict[str, List[List[float]]]  # by layer type


@dataclass
class CompareRun:
    """One pruning run of the comparison: a removed-counts pair and a seed,
    shared by the splits that remove those counts."""

    counts: List[int]  # (attention, GELU)
    seed: int
    splits: List[str]
    main: bool = field(default=False, metadata=OPTIONAL)  # the main run
    merged: Optional[str] = unset()
    work: Optional[str] = unset()
    checkpoint: Optional[str] = unset()
    decisions: Optional[List[Dict[str, Any]]] = unset()
    #: its last validation (the main run's accuracy is the merged test's)
    accuracy: Optional[float] = unset()


@dataclass
class NaiveSplit:
    """The naive split of one seed: the lowest raw gate scores."""

    scores: Dict[str, List[float]]  # gate scores by type at the first close
    removed: Dict[str, List[int]]  # blocks by type
    counts: List[int]


@dataclass
class CompareResult:
    """Stages ``prune`` (the runs) and ``compare`` (the naive splits)."""

    runs: Dict[str, CompareRun]
    naive: Dict[str, NaiveSplit]  # by seed
    seeds: List[int]


@dataclass
class MergeResult:
    """Stage ``merge``."""

    merged: str
    hook_output_identical: bool  # tools/merge_ckpt.py == the hook's file


@dataclass
class DensePredictionRun:
    """DETR or UperNet trained on the merged backbone."""

    before: Dict[str, Any]  # validation metrics before training
    after: Dict[str, Any]
    loss_curve: List[List[float]]
    loss_first: float
    loss_last: float
    iterations: int
    checkpoint: str


@dataclass
class TransferResult:
    """Stage ``transfer``."""

    merged_accuracy: float  # tools/test.py of the merged classifier
    detr: DensePredictionRun
    upernet: DensePredictionRun


@dataclass
class PlusResult:
    """Stage ``plus``: HetDPT+ (width pruning of the merged model)."""

    checkpoint: str
    ratio: float
    epochs: int
    widths: Dict[str, Any]
    macs: List[int]  # before, after
    macs_convention: str  # analysis.MACS_CONVENTIONS
    params: List[int]
    accuracy_before: float
    accuracy: float
    detr: Dict[str, Any]  # test metrics, untrained on it
    upernet: Dict[str, Any]


@dataclass
class BenchmarkModel:
    params: int
    macs: int
    median_ms: float
    speedup: float
    macs_speedup: float


@dataclass
class BenchmarkRun:
    """What the report needs from one ``tools/benchmark.py`` JSON."""

    batch_size: int
    threads: int
    repeats: int
    img_size: List[int]
    clock: str
    macs_convention: str
    markdown: str
    models: Dict[str, BenchmarkModel]


@dataclass
class TomePoint:
    """A classifier with ToMe at one ``r``."""

    model: str
    r: int
    removed_attn: str
    accuracy: float
    median_ms: float
    throughput: float
    macs: int


@dataclass
class CurvePoint:
    """A classifier at one operating point of a token-reduction method
    (``'tome'``: ``setting`` 'r=R' or 'r=R, inflect=I'; ``'gtp'``:
    'num_prop=N'), on the paper's Fig. 8 curves."""

    model: str
    method: str
    setting: str
    accuracy: float
    throughput: float
    macs: int


@dataclass
class TomeTiming:
    batch_size: int
    threads: int
    repeats: int
    clock: str
    img_size: List[int]
    macs_convention: str


@dataclass
class TomeTransferPoint:
    r: int
    metric: float
    median_ms: float
    throughput: float
    macs: int
    speedup: float


@dataclass
class TomeTransfer:
    """DETR or UperNet with ToMe."""

    metric: str
    img_size: List[int]
    batch_size: int
    repeats: int
    macs_convention: str
    points: List[TomeTransferPoint]


@dataclass
class AttnOnlyRun:
    attn_removed: List[int]
    seed: int


@dataclass
class TomeResult:
    """Stage ``tome``."""

    r: List[int]
    points: List[TomePoint]
    timing: TomeTiming
    transfer: Dict[str, TomeTransfer]
    map_attn_removed: List[int]
    attn_only: AttnOnlyRun
    curves: List[CurvePoint]  # Fig. 8: dense, HetDPT; ToMe, GTP-ViT


@dataclass
class DemoResults:
    """Every stage's record, ``None`` until the stage ran; ``tome_skipped``:
    the token-merging stage ran and measured nothing (``--quick``)."""

    dense: Optional[DenseResult] = unset()
    map: Optional[MapPoints] = unset()
    recovery: Optional[Dict[str, RecoveryRun]] = unset()
    fit: Optional[MapFitResult] = unset()
    prune: Optional[PruneResult] = unset()
    compare: Optional[CompareResult] = unset()
    merge: Optional[MergeResult] = unset()
    transfer: Optional[TransferResult] = unset()
    plus: Optional[PlusResult] = unset()
    benchmark: Optional[Dict[str, BenchmarkRun]] = unset()
    tome: Optional[TomeResult] = unset()
    tome_skipped: bool = field(default=False, metadata=OPTIONAL)
    headline: Optional[str] = unset()  # the report's, for the console


# ------------------------------------------------------------ the run
@dataclass
class Claim:
    """One statement of the report: whether it ``holds`` on this run, and
    the numbers (and names) that decide it."""

    name: str
    holds: bool
    numbers: Dict[str, Any] = field(default_factory=dict)


@dataclass
class StageTime:
    name: str
    title: str
    seconds: float
    cpu_seconds: float


@dataclass
class RunInfo:
    """How the demo ran: its command, machine, load and times."""

    mode: str
    command: str
    machine: str
    jobs: int
    threads: Union[int, str]  # 'auto': the cores shared out per stage
    job_threads: Dict[str, int]
    load_before: float
    load_after: float
    finished_at: str
    wall_seconds: float
    stages: List[StageTime]
    job_seconds: Dict[str, float]
    commands: List[str]
