"""What the state-function families share; family modules import from here and nowhere else in ``headwater.kernels``.

- :mod:`.operators`: the operator contract (:class:`~.operators.StateOp`, :class:`~.operators.LayoutOp`),
  :class:`~.operators.StateOpSpec`, batch and state checks, :func:`~.operators.build_op`.
- :mod:`.checks`: parameter checks that name the function, the parameter and what is expected.
- :mod:`.buffers`: per-key buffers that widen on demand (time windows, TopN, range counts).
- :mod:`.numeric`: Numba helpers and kernels used by more than one family.
"""
