"""The packing pipeline: collect → select → allocate → fit → render → recite → record (see `build`)."""

from .allocate import Allocation, Signals, allocate, distribute
from .build import ContextPack, build_pack, request_tokens
from .inputs import EvidenceItem, MemoryItem, PackInputs, PackState, TaskSpec, Turn, group_turns
from .fit import TruncationEvent
from .record import SCHEMA_VERSION, LayerUsage, Manifest
from .timing import StageTimes

__all__ = [
    "Allocation", "Signals", "allocate", "distribute", "ContextPack", "build_pack", "request_tokens",
    "EvidenceItem", "MemoryItem", "PackInputs", "PackState", "TaskSpec", "Turn", "group_turns",
    "TruncationEvent", "SCHEMA_VERSION", "LayerUsage", "Manifest", "StageTimes",
]
