"""Consumer groups: coordinator, offsets store and the pure partition assignors."""
