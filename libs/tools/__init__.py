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
    ToolDeclaration,
    normalise_resource,
)
from .demo import DEMO_TOOLS
from .executor import (
    AttemptResult,
    CallbackRefused,
    CallbackResult,
    Executor,
    Lookup,
    OperationCall,
)
from .registry import ToolRegistry, UnknownTool, default_registry, sandbox_client
from .sandbox import SandboxExecutor, classify_exception, classify_response

__all__ = [
    "DEMO_TOOLS",
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
    "SandboxExecutor",
    "ToolDeclaration",
    "ToolRegistry",
    "UnknownTool",
    "agent_refusal",
    "classify_exception",
    "classify_response",
    "default_registry",
    "normalise_resource",
    "sandbox_client",
]
