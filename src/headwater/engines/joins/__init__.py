"""Join engines (Orca C.12–C.17): two input streams merged into one join input table; see ``base``."""

from headwater.engines.joins.asof import AsofJoinEngine
from headwater.engines.joins.base import JoinEngine
from headwater.engines.joins.equal import EqualJoinEngine
from headwater.engines.joins.lookup import LookupJoinEngine
from headwater.engines.joins.semi import LeftSemiJoinEngine
from headwater.engines.joins.snapshot import SnapshotJoinEngine
from headwater.engines.joins.window import WindowJoinEngine

__all__ = ["AsofJoinEngine", "EqualJoinEngine", "JoinEngine", "LeftSemiJoinEngine", "LookupJoinEngine",
           "SnapshotJoinEngine", "WindowJoinEngine"]
