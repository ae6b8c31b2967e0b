"""membox_local: long-term conversational memory by topic continuity, on local models."""
from .config import Config, load_config
from .memory import Answer, Memory
from .records import Box, Change, Event, Message, Trace
from .store import NotFound

__all__ = ["Memory", "Answer", "Message", "Box", "Event", "Trace", "Change", "NotFound", "Config", "load_config"]
__version__ = "0.1.0"
