"""The DeiT/ViT architectures by name, as data: the ViT families' presets
and the analytic cost model's."""

#: Name -> ``arch`` dict of :class:`~hetdpt_mm.models.HetDPTViT`.
ARCH_PRESETS = {
    'deit-tiny': dict(
        embed_dims=192, num_layers=12, num_heads=3, mlp_ratio=4.0
    ),
    'deit-small': dict(
        embed_dims=384, num_layers=12, num_heads=6, mlp_ratio=4.0
    ),
    'deit-base': dict(
        embed_dims=768, num_layers=12, num_heads=12, mlp_ratio=4.0
    ),
}
