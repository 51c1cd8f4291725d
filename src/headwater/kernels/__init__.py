"""State kernels: the state functions of the reactive state engine and the window aggregation of the
time-series engine (see docs/architecture.md).

Each family is a module, or a package when it is big, that holds its operators, their
Numba kernels and a tuple ``SPECS`` of its functions:

- :mod:`.moving` — count windows: :mod:`~.moving.running` (``msum``, ``mavg``, ``mcount``,
  ``mvar``/``mstd``/``mvarp``/``mstdp``, ``mmax``/``mmin``, ``mimax``/``mimin``(``_last``),
  ``mfirst``/``mlast``) and :mod:`~.moving.scans` (``mrank``, ``mmed``, ``mpercentile``,
  ``mmad``, ``mskew``, ``mkurtosis``, ``mprod``, ``mmax_positive_streak``).
- :mod:`.cumulative` — ``cumsum``, ``cumavg``, ``cummax``, ``cummin``, ``cumcount``, ``cumprod``,
  ``cumfirst_not``, ``cumlast_not``, ``cumvar``/``cumstd``/``cumvarp``/``cumstdp``, ``cummed``,
  ``cumpercentile``, ``cumnunique``, ``cum_positive_streak``, ``cummdd``.
- :mod:`.pairwise` — two columns: ``mcorr``, ``mcovar``, ``mcovarp``, ``mbeta``, ``mslr``,
  ``mwsum``, ``mwavg`` and ``cumcorr``, ``cumcovar``, ``cumcovarp``, ``cumbeta``, ``cumwsum``, ``cumwavg``.
- :mod:`.ewm` — ``ewm_mean``, ``ewm_var``, ``ewm_std``, ``ewm_cov``, ``ewm_corr``.
- :mod:`.ta` — TA-lib: ``ema``, ``wilder``, ``gema``, ``sma``, ``wma``, ``dema``, ``tema``, ``t3``,
  ``trima``, ``kama``, ``ma``, ``linear_time_trend``.
- :mod:`.shift` — ``prev``, ``move``, ``deltas``, ``ratios``, ``percent_change``, ``ffill``, ``prev_state``.
- :mod:`.time_windows` — the tm-functions (``tmsum`` ... ``tmkurtosis``) and ``tmoving``.
- :mod:`.topn` — ``m<agg>_top_n``, ``cum<agg>_top_n``, ``tm<agg>_top_n``.
- :mod:`.finance` — ``dynamic_group_cumsum``/``dynamic_group_cumcount``, ``top_range``/``low_range``,
  ``true_range``, ``sumbars``, ``iterate``.
- :mod:`.higher_order` — ``segmentby``, ``moving``, ``window``, ``accumulate``, ``talib``,
  ``talib_null``, ``state_iterate``, ``conditional_iterate``, ``generic_state_iterate``.
- :mod:`.windows` — the time-series engine's event-time window aggregation (not state functions).

:mod:`.base` holds what families share (the operator contract, ``StateOpSpec``, parameter
checks, growable buffers, Numba helpers); a family imports from it and from no other module
of this package. :mod:`.registry` imports every family and builds ``STATE_OPS`` and
``make_state_op``.

Every kernel walks one micro-batch row by row in arrival order, reads and updates the per-key
state arrays *in place* at ``slots[i]`` and returns float64 outputs, one value per row. NaN is
NULL everywhere. The operators own validation, state growth and copying; kernels trust their
input. Because each row only sees the state left by the rows before it, any split of the rows
into batches gives bit-identical results to one batch. Kernels compiled with
``error_model="numpy"`` give inf/NaN on a float division by zero instead of raising, and every
result that could divide by a zero or underflowed denominator checks it first. Kernels are
compiled with ``cache=True``; Numba keeps the cache in the ``__pycache__`` folder beside each module
and checks only that module's file, not the helpers it calls from :mod:`.base` (see
:mod:`.base.numeric`).
"""
