# configs/hetdpt/dinov2-g_prune-15l_cifar100.py under sharded training:
# MMEngine's FlexibleRunner with HetDPTFSDPStrategy (MMEngine's FSDPStrategy,
# FSDP1, with the fixes of docs/user_guides/dinov2.md "Sharding"), every linear
# layer of the blocks an FSDP unit of its own, whole checkpoints gathered
# to rank 0 (state_dict_cfg='full', the same layout as a DDP checkpoint, so
# --resume, tools/merge.py and MergeCheckpointHook read them as usual).
#
# The gate scores (scalars, which FSDP cannot shard) stay whole on every rank
# and their gradients are averaged as DDP would; the prune hook reads them on
# every rank and closes the same gate everywhere; MergeCheckpointHook gathers
# the whole model to rank 0 and writes
# <work_dir>/dinov2-g_prune-15l_cifar100_fsdp_merged.pth.
#
# Gradient clipping is the base config's (max_norm 5): HetDPTFSDPStrategy
# clips by the norm of the whole gradient (FSDP.clip_grad_norm_), not of
# each rank's shards as MMEngine's OptimWrapper would.
#
#   bash tools/dist_train.sh configs/hetdpt/dinov2-g_prune-15l_cifar100_fsdp.py 8  # noqa: E501
_base_ = ['./dinov2-g_prune-15l_cifar100.py']

runner_type = 'FlexibleRunner'
strategy = dict(
    type='HetDPTFSDPStrategy',
    state_dict_cfg='full',
    model_wrapper=dict(
        type='HetDPTFullyShardedDataParallel',
        # Every module of >= 2 M parameters not yet wrapped, smallest
        # first: the blocks' qkv (7.1 M), proj (2.4 M), fc1 (12.6 M) and fc2
        # (6.3 M), so only one layer's weights are whole at a time; the
        # root unit keeps the rest (patch embedding, norms, LayerScale,
        # head).  The scalar gate scores stay out (replicated).
        auto_wrap_policy=dict(
            type='torch.distributed.fsdp.wrap.size_based_auto_wrap_policy',
            min_num_params=int(2e6),
        ),
    ),
)
# FSDP handles closed gates' unused parameters itself (no DDP here).
model_wrapper_cfg = None
