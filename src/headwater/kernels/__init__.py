"""state layer (see docs/architecture.md)."""
