"""What the state-function families share; family modules import from here and nowhere else in ``headwater.kernels``.

- :mod:`.operators`: the operator contract (:class:`~.operators.StateOp`, :class:`~.operators.LayoutOp`),
  :class:`~.operators.StateOpSpec`, batch, state and parameter checks, :func:`~.operators.build_op`.
- :mod:`.buffers`: per-key buffers that widen on demand (time windows, TopN, range counts).
- :mod:`.numeric`: Numba helpers and kernels used by more than one family.
"""
