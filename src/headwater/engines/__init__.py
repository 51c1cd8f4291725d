"""engines layer (see docs/architecture.md)."""
