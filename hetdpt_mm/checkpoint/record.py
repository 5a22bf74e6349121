"""The one typed record of a HetDPT backbone in a checkpoint, read once.

A record comes from the backbone's ``<prefix>_extra_state`` entry (it
travels with the weights through every saving path), else from
``checkpoint['meta']['hetdpt']``, else from the tensors alone; whatever the
source, :func:`~hetdpt_mm.checkpoint.reader.read_backbone_checkpoint` checks
it against the tensors (docs/advanced/checkpoint_record.md).
"""

import json
import re
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional

import torch

from ..errors import CheckpointError
from ..fileio import loads_json
from ..spec import FORMS, PruneSpec
from .safe_load import EXTRA_STATE_KEY, source_of

#: The fields of a record and their types; anything else is refused.
RECORD_FIELDS = dict(
    version=int,
    family=str,
    spec=Mapping,
    form=str,
    arch=Mapping,
    semantics=Mapping,
    prefix=str,
    teacher_prefix=str,
    backbones=Mapping,
)
#: Bounds of a record (ours are a few hundred bytes, nested up to six deep
#: in a meta record listing several backbones): a hostile file must not make
#: a loader parse or build without limit.
MAX_RECORD_BYTES = 1 << 20
MAX_RECORD_NESTING = 8
MAX_DEPTH = 1024
#: Version of the record layout written into checkpoints.
RECORD_VERSION = 2
_FAMILY_NAME = re.compile(r'[a-z][a-z0-9_]{0,63}')


def parse_record_text(text: str, where: str) -> Any:
    """A record's JSON, read by the one strict reader (a record given as a
    dict in ``meta`` goes through it too: plain data only)."""
    try:
        return loads_json(text, where, max_depth=MAX_RECORD_NESTING)
    except ValueError as err:
        raise CheckpointError(
            f'{where}: corrupt HetDPT record ({err})'
        ) from None


@dataclass(frozen=True)
class HetDPTRecord:
    """The structure of one HetDPT backbone, as stored with its weights.

    ``arch`` holds the family's constructor arguments that fix the shapes
    (``None`` when the record was inferred from tensors that do not say them
    all); ``origin`` says where the record was read from (``'extra_state'``,
    ``'meta'`` or ``'tensors'``) and ``source`` names the file.
    """

    spec: PruneSpec
    form: str
    family: str = 'vit'
    arch: Optional[Mapping[str, Any]] = None
    semantics: Mapping[str, str] = field(default_factory=dict)
    prefix: str = ''
    teacher_prefix: Optional[str] = None
    source: str = 'checkpoint'
    origin: str = 'extra_state'
    #: Unmerged FFNs look the same with or without their GELU: a pruned file
    #: without a written record and with attention removed (an authors'
    #: stage-2 checkpoint) cannot say which GELUs are gone.
    act_unknown: bool = False

    @property
    def from_tensors(self) -> bool:
        return self.origin == 'tensors'

    def to_dict(self, with_prefix: bool = True) -> Dict[str, Any]:
        """Plain data (safe for ``weights_only`` loading and JSON)."""
        data = dict(
            version=RECORD_VERSION,
            family=self.family,
            spec=self.spec.to_dict(),
            form=self.form,
            arch=plain_data(self.arch),
            semantics=dict(self.semantics),
        )
        if with_prefix:
            data['prefix'] = self.prefix
            if self.teacher_prefix:
                data['teacher_prefix'] = self.teacher_prefix
        return data

    @classmethod
    def from_dict(
        cls, data: Mapping, source: str = 'checkpoint', origin: str = 'meta'
    ) -> 'HetDPTRecord':
        """The one parse of a record: fields, types and bounds; the family
        checks what its arguments mean (``verify_record``)."""
        if origin == 'meta':
            try:
                text = json.dumps(data, allow_nan=False)
            except (TypeError, ValueError) as err:
                raise CheckpointError(
                    f'{source}: HetDPT record: {err}'
                ) from None
            data = parse_record_text(text, source)
        if not isinstance(data, Mapping):
            raise CheckpointError(f'{source}: HetDPT record is not a dict')
        version, family = data.get('version', 1), data.get('family', 'vit')
        spec, semantics = data.get('spec'), data.get('semantics') or {}
        invalid = [
            name
            for name, value in data.items()
            if not isinstance(value, (RECORD_FIELDS.get(name, ()), type(None)))
        ] + [
            name
            for name, valid in (
                ('version', type(version) is int and version in (1, 2)),
                ('family', _FAMILY_NAME.fullmatch(str(family))),
                ('form', data.get('form') in FORMS),
                (
                    'spec.depth',
                    isinstance(spec, Mapping)
                    and type(spec.get('depth')) is int
                    and 0 < spec['depth'] <= MAX_DEPTH,
                ),
                (
                    'semantics',
                    all(isinstance(v, str) for v in dict(semantics).values()),
                ),
            )
            if not valid
        ]
        if invalid:
            raise CheckpointError(
                f'{source}: HetDPT record with invalid {sorted(set(invalid))}'
                ' (docs/advanced/checkpoint_record.md)'
            )
        try:
            spec = PruneSpec.from_dict(spec)
        except (TypeError, ValueError) as err:
            raise CheckpointError(
                f'{source}: HetDPT record spec: {err}'
            ) from None
        return cls(
            spec=spec,
            form=data['form'],
            family=family,
            arch=data.get('arch'),
            semantics=dict(semantics),
            prefix=data.get('prefix') or '',
            teacher_prefix=data.get('teacher_prefix'),
            source=source,
            origin=origin,
        )

    def describe(self) -> str:
        return f'{self.family} {self.form} {self.spec}'

    def same_structure(self, other: 'HetDPTRecord') -> bool:
        """Whether two records build the same modules (the spec of a gated
        network lives in its gate buffers, not in its modules)."""
        same_spec = self.form == 'gated' or self.spec == other.spec
        return (
            self.family == other.family
            and self.form == other.form
            and same_spec
            and dict(self.semantics) == dict(other.semantics)
        )


def encode_record(data: Mapping[str, Any]) -> torch.Tensor:
    """A record as a uint8 tensor of UTF-8 JSON: a byte tensor passes
    everywhere a state dict goes (MMEngine's broadcast and EMA, tracing) and
    loads with ``weights_only=True``."""
    text = json.dumps(plain_data(data), sort_keys=True)
    return torch.tensor(list(text.encode('utf-8')), dtype=torch.uint8)


def decode_record(
    value: Any, where: str = 'a state dict entry'
) -> Dict[str, Any]:
    """The record in a state-dict entry (a 1-D byte tensor of UTF-8 JSON, or
    its dict), for every reader of ``*_extra_state``: anything else is a
    :class:`CheckpointError` naming ``where``, never taken for no record."""
    if isinstance(value, torch.Tensor):
        if (
            value.dtype != torch.uint8
            or value.dim() != 1
            or (value.numel() > MAX_RECORD_BYTES)
        ):
            raise CheckpointError(
                f'{where}: corrupt HetDPT record (a {tuple(value.shape)} '
                f'{value.dtype} tensor, not at most 1 MiB of uint8 JSON)'
            )
        value = parse_record_text(
            value.numpy().tobytes().decode('utf-8', 'replace'), where
        )
    if not isinstance(value, Mapping):
        raise CheckpointError(f'{where}: corrupt HetDPT record (not a dict)')
    return dict(value)


def records_in(
    state_dict: Mapping, source: str = 'the loaded state dict'
) -> Dict[str, Dict[str, Any]]:
    """Every record of a state dict, by the prefix of its module."""
    found = {}
    for key, value in state_dict.items():
        if key.endswith(EXTRA_STATE_KEY):
            found[key[: -len(EXTRA_STATE_KEY)]] = decode_record(
                value, f'{source_of(value) or source}: {key}'
            )
    return found


class RecordInStateDict:
    """Mixin for modules that save a record with their weights under
    ``<prefix>_extra_state``, encoded by :func:`encode_record`."""

    def state_record(self) -> Dict[str, Any]:
        raise NotImplementedError

    def load_state_record(self, record: Mapping[str, Any]) -> None:
        """Called with the loaded record before the children load."""

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        destination[prefix + EXTRA_STATE_KEY] = encode_record(
            self.state_record()
        )

    def set_extra_state(self, state) -> None:
        # torch's loader hands the record over here.
        self.load_state_record(
            decode_record(
                state,
                source_of(state)
                or f'{EXTRA_STATE_KEY} of {type(self).__name__}',
            )
        )

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        key, missing_keys = prefix + EXTRA_STATE_KEY, args[2]
        if key not in state_dict and key in missing_keys:
            missing_keys.remove(key)  # written before records travelled


def plain_data(value):
    """Tuples to lists, recursively: records compare equal after a round
    trip through JSON or a checkpoint."""
    if isinstance(value, Mapping):
        return {k: plain_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_data(v) for v in value]
    return value


def with_record(state_dict: Mapping, record: HetDPTRecord) -> Dict:
    """``state_dict`` (relative to the backbone) with ``record`` as its
    extra state, replacing any older one."""
    out = {k: v for k, v in state_dict.items() if k != EXTRA_STATE_KEY}
    out[EXTRA_STATE_KEY] = encode_record(record.to_dict(with_prefix=False))
    return out
