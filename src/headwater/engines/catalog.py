"""Every engine spec, by the kind Orca names it: what a stored plan may hold, and what the warm-up runs.

>>> SPECS[EngineKind.TIME_SERIES].__name__
'TimeSeriesEngine'
"""

from __future__ import annotations

from headwater.engines.anomaly import AnomalyDetectionEngine
from headwater.engines.base import EngineKind, EngineSpec
from headwater.engines.cross_sectional import CrossSectionalEngine
from headwater.engines.daily_time_series import DailyTimeSeriesEngine
from headwater.engines.joins import (
    AsofJoinEngine,
    EqualJoinEngine,
    LeftSemiJoinEngine,
    LookupJoinEngine,
    SnapshotJoinEngine,
    WindowJoinEngine,
)
from headwater.engines.order_book import CryptoOrderBookEngine
from headwater.engines.pricing import PricingEngine
from headwater.engines.reactive_state import (
    DualOwnershipReactiveStateEngine,
    NarrowReactiveStateEngine,
    ReactiveStateEngine,
)
from headwater.engines.reactive_stateless import ReactiveStatelessEngine
from headwater.engines.rule import RuleEngine
from headwater.engines.session_window import SessionWindowEngine
from headwater.engines.time_bucket import TimeBucketEngine
from headwater.engines.time_series import TimeSeriesEngine
from headwater.engines.udf import TimerEngine, UdfEngine

SPECS: dict[EngineKind, type[EngineSpec]] = {spec.kind: spec for spec in (
    TimeSeriesEngine, SessionWindowEngine, TimeBucketEngine, DailyTimeSeriesEngine, CrossSectionalEngine,
    ReactiveStateEngine, NarrowReactiveStateEngine, DualOwnershipReactiveStateEngine, ReactiveStatelessEngine,
    AnomalyDetectionEngine, RuleEngine, AsofJoinEngine, WindowJoinEngine, EqualJoinEngine, LookupJoinEngine,
    LeftSemiJoinEngine, SnapshotJoinEngine, PricingEngine, CryptoOrderBookEngine, UdfEngine, TimerEngine,
)}
"""Adding an engine means adding its spec here (``tests/unit/test_plan_document.py`` checks every kind is)."""
