"""MMEngine hooks of hetdpt_mm (registered in mmengine's HOOKS on import)."""
