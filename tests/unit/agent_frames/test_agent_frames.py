"""The agent channel's published contract: proto/agent-asyncapi.json is valid AsyncAPI 3.0.0,
up to date, and its payload schemas accept the frames the surface really sends."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
from jsonschema import Draft7Validator, Draft202012Validator

from holdline.client import frames as agent_frames
from holdline.client.frames import AckedFrame, DeliverySayFrame, ErrorFrame, Fact, HelloFrame

PROTO = Path(__file__).resolve().parents[3] / "proto"
DOCUMENT = PROTO / "agent-asyncapi.json"
OFFICIAL = PROTO / "vendor" / "asyncapi-3.0.0.schema.json"


def _load(path: Path) -> Any:
    return json.loads(path.read_text())


def test_the_document_is_up_to_date_and_valid_asyncapi() -> None:
    document = _load(DOCUMENT)
    assert document == json.loads(json.dumps(agent_frames.asyncapi_document()))
    errors = list(Draft7Validator(_load(OFFICIAL)).iter_errors(document))
    assert errors == [], [e.message for e in errors[:5]]


def test_every_frame_is_a_message_and_real_frames_match_their_payloads() -> None:
    document = _load(DOCUMENT)
    messages = document["components"]["messages"]
    assert set(messages) == {
        "signal", "delivery_ack", "hello", "delivery_say", "delivery_acked", "error"
    }
    schemas = document["components"]["schemas"]
    frames = {
        "hello": HelloFrame(session_id="s_1", connection_id="agent_1", after=0),
        "delivery_say": DeliverySayFrame(
            seq=7, delivery_id="dlv-1", batch_id="batch_1", text="All done: github.",
            facts=[Fact(operation_id="op_1", tool="provision_access", status="committed",
                        summary="provision_access(access=github): committed")],
            priority="normal", interrupt=False,
        ),
        "delivery_acked": AckedFrame(delivery_id="dlv-1", status="spoken",
                                     delivery_status="spoken"),
        "error": ErrorFrame(code="unknown_delivery", status=404, detail="no such delivery"),
    }
    for key, frame in frames.items():
        schema = {**messages[key]["payload"], "$defs": schemas}
        text = json.dumps(schema).replace("#/components/schemas/", "#/$defs/")
        validator = Draft202012Validator(json.loads(text))
        assert validator.is_valid(json.loads(agent_frames.encode(frame))), key
    refused = {"type": "delivery.say", "seq": "7"}
    schema = json.loads(
        json.dumps({**messages["delivery_say"]["payload"], "$defs": schemas}).replace(
            "#/components/schemas/", "#/$defs/"
        )
    )
    assert not Draft202012Validator(schema).is_valid(refused)
    assert msgspec.json.decode(b'{"type": "signal", "user_speaking": true}',
                               type=agent_frames.ClientFrame)
