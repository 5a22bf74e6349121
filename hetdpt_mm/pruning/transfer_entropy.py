"""Transfer-entropy (TE) layer score for MAP data collection (docs/method.md
section 2).  Neither NOSE nor the HetDPT release pins the formula down; the
exact definition implemented here is in docs/user_guides/map.md, *The
transfer-entropy (TE) score*."""

from dataclasses import dataclass
from typing import Iterable, List, Optional, Sequence, Tuple

import torch

from ..spec import PruneSpec

__all__ = [
    'ENTROPY_EPS',
    'gaussian_entropy',
    'class_features',
    'TECandidate',
    'TESelection',
    'te_select',
]

#: Lower bound on a channel's standard deviation inside the logarithm.
ENTROPY_EPS = 1e-12


def gaussian_entropy(
    features: torch.Tensor, eps: float = ENTROPY_EPS
) -> float:
    """``H = sum_c log(std_c)`` of ``N x C`` features (see module doc)."""
    if features.dim() != 2 or len(features) < 2:
        raise ValueError(f'features must be N x C, N >= 2: {features.shape}')
    std = features.double().std(dim=0, correction=0)
    return float(torch.log(std.clamp_min(eps)).sum())


@torch.no_grad()
def class_features(
    backbone: torch.nn.Module, batches: Iterable[torch.Tensor]
) -> torch.Tensor:
    """The backbone's final class features on preprocessed image batches,
    concatenated into one ``N x C`` tensor (batches are moved to the
    backbone's device; the result is on the CPU)."""
    device = next(backbone.parameters()).device
    features = []
    for inputs in batches:
        output = backbone.class_feature(inputs.to(device))
        features.append(output.float().cpu())
    return torch.cat(features)


@dataclass(frozen=True)
class TECandidate:
    """One removal trial: the entropy with the layer removed and its score
    ``|entropy - base entropy|``."""

    kind: str
    index: int
    entropy: float
    score: float


@dataclass(frozen=True)
class TESelection:
    """The outcome of :func:`te_select`: all trials and the chosen layer."""

    kind: str
    spec: PruneSpec
    base_entropy: float
    candidates: Tuple[TECandidate, ...]

    @property
    def chosen(self) -> TECandidate:
        return min(self.candidates, key=lambda c: (c.score, c.index))

    def format_table(self) -> str:
        lines = [
            f'TE scores for removing one more {self.kind} layer from '
            f'{self.spec} (H = {self.base_entropy:.4f}):',
            f'  {"block":>5}  {"H removed":>12}  {"|dH|":>10}',
        ]
        chosen = self.chosen
        for candidate in self.candidates:
            mark = '  <- removed' if candidate is chosen else ''
            lines.append(
                f'  {candidate.index:>5}  {candidate.entropy:>12.4f}'
                f'  {candidate.score:>10.4f}{mark}'
            )
        return '\n'.join(lines)


def te_select(
    backbone: torch.nn.Module,
    batches: Sequence[torch.Tensor],
    kind: str,
    candidates: Optional[Iterable[int]] = None,
) -> TESelection:
    """Score removing each present ``kind`` layer of a gated HetDPTViT by
    toggling its gate, and return all scores and the layer to remove.

    ``batches`` are preprocessed calibration images (a sequence, reused for
    every trial).  ``candidates`` restricts the blocks tried (default: every
    block whose ``kind`` layer is present).  The backbone's gates and
    train/eval mode are restored before returning.
    """
    if getattr(backbone, 'form', None) != 'gated':
        raise ValueError('TE scoring toggles gates: build with gated=True')
    spec = backbone.prune_spec
    present = [i for i in range(spec.depth) if not spec.is_removed(kind, i)]
    wanted = present if candidates is None else sorted(set(candidates))
    if not wanted or not set(wanted) <= set(present):
        raise ValueError(f'{kind} candidates {wanted} are not open in {spec}')

    was_training = backbone.training
    backbone.eval()
    trials: List[TECandidate] = []
    try:
        base = gaussian_entropy(class_features(backbone, batches))
        for index in wanted:
            backbone.set_spec(spec.with_removed(kind, index))
            entropy = gaussian_entropy(class_features(backbone, batches))
            trials.append(
                TECandidate(kind, index, entropy, abs(entropy - base))
            )
    finally:
        backbone.set_spec(spec)
        backbone.train(was_training)
    return TESelection(kind, spec, base, tuple(trials))
