"""Language models behind a small interface, chosen by name (`HOLDLINE_MODEL`, see `registry`)."""

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
from .openai_responses import OpenAIResponsesModel
from .registry import (
    UnknownModel,
    get_model,
    model_for,
    register,
)
from .template import NoModelConfigured, TemplateModel, explain_from_templates

__all__ = [
    "AdmissionNote",
    "ChatCompletionsModel",
    "ChatMessage",
    "ConversationModel",
    "LiveOperation",
    "ModelError",
    "NoModelConfigured",
    "OpenAIResponsesModel",
    "OperationOutcome",
    "PendingUpdate",
    "ProposedCall",
    "SummaryModel",
    "TemplateModel",
    "ToolSpec",
    "TurnReply",
    "TurnRequest",
    "UnknownModel",
    "explain_from_templates",
    "get_model",
    "model_for",
    "register",
]
