"""Validate the starting model before the first training step."""

from mmengine.hooks import Hook
from mmengine.registry import HOOKS


@HOOKS.register_module()
class ValidateFirstHook(Hook):
    """Run the validation loop once before training starts (not when a run
    is resumed), so that one training run reports its starting point and
    its result: a fine-tune's accuracy right after a layer was removed, a
    detector's with its heads as constructed.

    The lowest priority: other hooks' ``before_train`` (gates closed by a
    prune hook, say) has run when the model is validated.  MMEngine's
    loops validate only after epochs or iterations.
    """

    priority = 'LOWEST'

    def before_train(self, runner) -> None:
        if runner.iter == 0 and runner.val_loop is not None:
            runner.val_loop.run()
