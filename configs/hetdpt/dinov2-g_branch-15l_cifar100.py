# DINOv2-Giant on CIFAR-100 with the structure of the paper's Table 6 row
# "HetDPT (15 layers)": 8 whole attention branches and 7 whole FFN branches
# removed (whole-branch removal, docs/user_guides/dinov2.md), 927.12 M
# parameters with the 100-class head at 224 px, as the paper prints.
# Fine-tunes that fixed structure from the dense DINOv2-g weights (official
# facebookresearch or timm); no SwiGLU activation is removed (it cannot merge).
#
# The block indices are a choice: the paper does not publish its spec.
# Attention branches of the last 8 blocks go (deep attention layers are
# commonly the most removable in large pre-trained transformers; not
# measured here), FFN branches of the 7 blocks before them, so that every
# block keeps one branch.  A search run picking its own indices
# is ./dinov2-g_prune-15l_cifar100.py with the gates of whole-branch removal
# (removed_attn_output='identity', HetDPTPruneHook counts=dict(attn=8,
# act=0, ffn=7)).
#
#   bash tools/dist_train.sh configs/hetdpt/dinov2-g_branch-15l_cifar100.py 8
_base_ = ['./dinov2-g_prune-15l_cifar100.py']

model = dict(
    backbone=dict(
        gated=False,
        removed_attn_output='identity',
        prune_spec=dict(
            attn_removed=list(range(32, 40)), ffn_removed=list(range(25, 32))
        ),
    )
)
# The structure is fixed: no gates to close, nothing to merge.
custom_hooks = []
model_wrapper_cfg = dict(
    type='MMDistributedDataParallel', find_unused_parameters=False
)
