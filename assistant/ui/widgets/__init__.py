"""The chat's widgets, one concept per module."""
