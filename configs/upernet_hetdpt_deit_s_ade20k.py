# UperNet on ADE20K with a HetDPT depth-pruned DeiT-S backbone; the
# 384-channel neck and heads are those of mmseg's
# vit/vit_deit-s16_mln_upernet_8xb2-160k_ade20k-512x512.py.
_base_ = './_base_/models/upernet_hetdpt_vit.py'

hetdpt_checkpoint = 'checkpoints/hetdpt_deit-s_10l_merged.pth'

model = dict(
    backbone=dict(
        arch='deit-small', init_cfg=dict(checkpoint=hetdpt_checkpoint)
    ),
    neck=dict(in_channels=[384, 384, 384, 384], out_channels=384),
    decode_head=dict(in_channels=[384, 384, 384, 384]),
    auxiliary_head=dict(in_channels=384),
)
