"""State functions of the reactive state engine: see the module docstring of :mod:`headwater.state.ops`."""

from __future__ import annotations
