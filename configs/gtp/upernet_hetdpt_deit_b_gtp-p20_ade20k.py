# UperNet on ADE20K with the merged HetDPT DeiT-B backbone and graph-based
# token propagation (GTP-ViT), 20 patches per block; every level is
# unmerged onto the full grid (docs/user_guides/token_merge.md).
_base_ = '../upernet_hetdpt_deit_b_ade20k.py'

model = dict(backbone=dict(graph_propagation=dict(num_prop=20)))
