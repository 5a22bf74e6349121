# DETR with the merged HetDPT DeiT-B backbone and graph-based token
# propagation (GTP-ViT), 20 patches per block; the featmap is unmerged onto
# the full grid before the neck (docs/user_guides/token_merge.md).
_base_ = '../detr_hetdpt_deit_b.py'

model = dict(backbone=dict(graph_propagation=dict(num_prop=20)))
