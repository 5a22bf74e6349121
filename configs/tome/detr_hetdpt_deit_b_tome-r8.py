# DETR with the merged HetDPT DeiT-B backbone and token merging (ToMe), 8
# tokens per block; the featmap is unmerged onto the full grid before the
# neck (docs/user_guides/token_merge.md).
_base_ = '../detr_hetdpt_deit_b.py'

model = dict(backbone=dict(token_merge=dict(r=8)))
