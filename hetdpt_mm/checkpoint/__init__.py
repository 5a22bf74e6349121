"""Reading checkpoints: safe loading of any file or URL (:mod:`.safe_load`),
the record that travels with the weights (:mod:`.record`), and the one
reader that finds a checkpoint's backbone and verifies its record against
its tensors or refuses it (:mod:`.reader`)."""
