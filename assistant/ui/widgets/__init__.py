"""The chat's visible widgets, one concept per module; the parts never shown are in ``assistant.ui.components``."""
