# The structure of the paper's Table 6 row "NOSE (12 layers)" on DINOv2-g,
# CIFAR-100: 12 whole attention branches removed (whole-branch removal,
# docs/user_guides/dinov2.md), 1021.55 M parameters with the 100-class head at
# 224 px, as the paper prints; fine-tuned as ./dinov2-g_branch-15l_cifar100.py.
# The indices (the last 12 blocks' attention) are a choice: the paper does
# not publish them.
_base_ = ['./dinov2-g_branch-15l_cifar100.py']

model = dict(
    backbone=dict(
        prune_spec=dict(_delete_=True, attn_removed=list(range(28, 40)))
    )
)
