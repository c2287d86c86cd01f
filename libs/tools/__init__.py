"""Tool declarations, executors and the registry that binds them by name."""

from .declaration import BusinessLimits, DuplicatePolicy, Limits, OverflowPolicy, ToolDeclaration
from .demo import DEMO_TOOLS, normalise_resource
from .executor import AttemptResult, Executor, Lookup, OperationCall
from .registry import ToolRegistry, UnknownTool, default_registry, sandbox_client
from .sandbox import SandboxExecutor, classify_exception, classify_response

__all__ = [
    "DEMO_TOOLS",
    "AttemptResult",
    "BusinessLimits",
    "DuplicatePolicy",
    "Executor",
    "Limits",
    "Lookup",
    "OperationCall",
    "OverflowPolicy",
    "SandboxExecutor",
    "ToolDeclaration",
    "ToolRegistry",
    "UnknownTool",
    "classify_exception",
    "classify_response",
    "default_registry",
    "normalise_resource",
    "sandbox_client",
]
