"""Tool declarations, executors and the registry that binds them by name."""

from .agents import AgentDeclaration, AgentRefusal, agent_refusal
from .checks import DeclarationError
from .declaration import (
    BusinessLimits,
    Caller,
    DuplicatePolicy,
    Limits,
    OverflowPolicy,
    Role,
    SpeechHints,
    ToolDeclaration,
    normalise_resource,
)
from .executor import (
    AttemptResult,
    CallbackRefused,
    CallbackResult,
    Executor,
    Lookup,
    OperationCall,
)
from .registry import ToolRegistry, UnknownTool, default_registry, sandbox_client
from .wire import classify_exception

__all__ = [
    "AgentDeclaration",
    "AgentRefusal",
    "AttemptResult",
    "BusinessLimits",
    "CallbackRefused",
    "CallbackResult",
    "Caller",
    "DeclarationError",
    "DuplicatePolicy",
    "Executor",
    "Limits",
    "Lookup",
    "OperationCall",
    "OverflowPolicy",
    "Role",
    "SpeechHints",
    "ToolDeclaration",
    "ToolRegistry",
    "UnknownTool",
    "agent_refusal",
    "classify_exception",
    "default_registry",
    "normalise_resource",
    "sandbox_client",
]
