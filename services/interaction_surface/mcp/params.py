"""The params of the tasks methods (both protocol versions), and a call answered as a task."""

from __future__ import annotations

from typing import Any, NamedTuple

from mcp_types import RequestParams
from pydantic import ConfigDict, Field

from .tasks import TaskFacts


class Tasked(NamedTuple):
    """A call answered as a task: its batch's facts, and what admission answered."""

    facts: TaskFacts
    output: str


class TaskParams(RequestParams):
    """`tasks/get` and `tasks/cancel`: the task's id."""

    model_config = ConfigDict(populate_by_name=True)

    task_id: str = Field(alias="taskId", min_length=1, max_length=128)


class UpdateParams(TaskParams):
    """`tasks/update`: the task's id and the answers to its input requests."""

    input_responses: dict[str, Any] = Field(alias="inputResponses")
