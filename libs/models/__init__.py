"""Language models behind a small interface, chosen by name (`HOLDLINE_MODEL`, default mock)."""

from .chat_completions import ChatCompletionsModel
from .interface import (
    AdmissionNote,
    ChatMessage,
    ConversationModel,
    LiveOperation,
    ModelError,
    OperationOutcome,
    PendingUpdate,
    ProposedCall,
    SummaryModel,
    ToolSpec,
    TurnReply,
    TurnRequest,
)
from .mock import MockModel
from .openai_responses import OpenAIResponsesModel
from .registry import (
    UnknownModel,
    get_model,
    model_for,
    register,
)

__all__ = [
    "AdmissionNote",
    "ChatCompletionsModel",
    "ChatMessage",
    "ConversationModel",
    "LiveOperation",
    "MockModel",
    "ModelError",
    "OpenAIResponsesModel",
    "OperationOutcome",
    "PendingUpdate",
    "ProposedCall",
    "SummaryModel",
    "ToolSpec",
    "TurnReply",
    "TurnRequest",
    "UnknownModel",
    "get_model",
    "model_for",
    "register",
]
