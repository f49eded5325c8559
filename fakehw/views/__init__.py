"""Views of the model for other tools: topology matrices, scheduler configs, labels (pure functions)."""
