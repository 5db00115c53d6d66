"""The stages of a query plan, one module per stage type, one interface (base.py): candidates
in, candidates out. Retrieve runs where the index's files are (a shard); fuse, windows, rerank,
passages and any registered stage run where the lists are gathered (a coordinator)."""
from .base import Candidates, PlanStage, QuerySource, StageType, register_stage, registered, stage_type  # noqa: F401
