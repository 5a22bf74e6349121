# HetDPT+ at the paper's 3.7 GMACs operating point (20.0 M params;
# docs/user_guides/reproduce.md): ./deit-b_plus-2.4g_finetune_in1k.py's
# fine-tune from the merged HetDPT DeiT-B pruned in width to 3.7 GMACs, counted
# as the paper counts HetDPT+ (without attention's token x token products):
#
#   python tools/prune_width.py checkpoints/hetdpt_deit-b_10l_merged.pth \
#       checkpoints/hetdpt-plus_deit-b_3.7g.pth --target-macs 3.7G \
#       --macs-convention without-attention-products \
#       --importance taylor --calib-dir data/imagenet/train
_base_ = './deit-b_plus-2.4g_finetune_in1k.py'

hetdpt_checkpoint = 'checkpoints/hetdpt-plus_deit-b_3.7g.pth'
model = dict(
    backbone=dict(init_cfg=dict(checkpoint=hetdpt_checkpoint)),
    head=dict(init_cfg=dict(checkpoint=hetdpt_checkpoint)),
)
