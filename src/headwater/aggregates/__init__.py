"""Aggregates (``sum``, ``std``, ``first``, ...): every rule stated once, in the forms the engines need.

* :mod:`.rules` -- the catalogue (names, codes, result types) and the one summary of rows each aggregate
  keeps, with how it grows by a row (``add``), combines with another (``merge``) and gives its value
  (``finish``): NULLs, empty input, degrees of freedom and overflow are decided there and nowhere else.
* :mod:`.groups` -- over groups of rows at once (session windows, window joins, cross-sections), and as
  mergeable partials (the calendar windows' panes).
* :mod:`.prefix` -- as running prefixes (a session's updates).
* :mod:`.values` -- over a buffer of values (the reactive engine's ``moving``/``window``, TopN), with the
  aggregates that need every value (``med``, ``range``, ``prod``).

The time-series kernel (:mod:`headwater.kernels.windows`) keeps the same summaries per pane in its own
compiled state and merges them with the same functions.
"""
