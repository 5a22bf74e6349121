# HetDPT+ at the paper's 1.1 GMACs operating point (6.2 M params;
# docs/user_guides/reproduce.md): ./deit-b_plus-2.4g_finetune_in1k.py's
# fine-tune from the merged HetDPT DeiT-B pruned in width to 1.1 GMACs, counted
# as the paper counts HetDPT+ (without attention's token x token products):
#
#   python tools/prune_width.py checkpoints/hetdpt_deit-b_10l_merged.pth \
#       checkpoints/hetdpt-plus_deit-b_1.1g.pth --target-macs 1.1G \
#       --macs-convention without-attention-products \
#       --importance taylor --calib-dir data/imagenet/train
_base_ = './deit-b_plus-2.4g_finetune_in1k.py'

hetdpt_checkpoint = 'checkpoints/hetdpt-plus_deit-b_1.1g.pth'
model = dict(
    backbone=dict(init_cfg=dict(checkpoint=hetdpt_checkpoint)),
    head=dict(init_cfg=dict(checkpoint=hetdpt_checkpoint)),
)
