# UperNet on ADE20K (512x512 crops, 160k iterations) with a HetDPT
# depth-pruned DeiT-B backbone (docs/method.md §5).  Neck, heads, data and
# schedule are mmseg's own DeiT-B UperNet config
# (./_base_/models/upernet_hetdpt_vit.py); only the backbone changes.
_base_ = './_base_/models/upernet_hetdpt_vit.py'

hetdpt_checkpoint = 'checkpoints/hetdpt_deit-b_10l_merged.pth'

model = dict(
    backbone=dict(
        arch='deit-base', init_cfg=dict(checkpoint=hetdpt_checkpoint)
    )
)
