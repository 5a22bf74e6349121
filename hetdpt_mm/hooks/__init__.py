"""MMEngine hooks of hetdpt_mm (registered in mmengine's HOOKS on import)."""

from .epoch_seed_hook import EpochSeedHook  # noqa: F401
from .map_collect_hook import MAPCollectHook, SubsetSampler  # noqa: F401
from .merge_hook import MergeCheckpointHook  # noqa: F401
from .prune_hook import HetDPTPruneHook  # noqa: F401
from .spec_meta_hook import HetDPTMetaHook  # noqa: F401
from .validate_first_hook import ValidateFirstHook  # noqa: F401
from .width_hook import WidthPruneHook  # noqa: F401
