"""The wire format of everything omlx puts in Redis (inference/dispatch/signed_json.py): JSON with
Huey's types tagged, signed per purpose; nothing else is read back."""

import datetime

import pytest
from huey.registry import Message

from inference.dispatch.signed_json import ForgedMessage, SignedJson

SECRET = "unit-test-secret-0123456789"


def test_a_job_round_trips_with_its_types_and_user_dollar_keys():
    signed = SignedJson(SECRET, "huey")
    tool = {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}, "$defs": {"A": {"type": "string"}}}
    job = {"request_id": "r", "tools": [tool], "odd": {"$tuple": [1]}}
    eta = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    message = Message("id", "inference.dispatch.huey.generate", eta, 0, 0, None, (job,), {})
    message = message._replace(expires=datetime.timedelta(seconds=300))
    assert signed.loads(signed.dumps(message)) == message


def test_anything_not_signed_for_this_purpose_with_this_secret_is_refused():
    signed = SignedJson(SECRET, "huey")
    data = signed.dumps({"a": 1})
    for forged in (
        data.replace(b'"a":1', b'"a":2'),  # altered
        SignedJson("another-secret-0123456789", "huey").dumps({"a": 1}),
        SignedJson(SECRET, "channels").dumps({"a": 1}),  # another purpose
        b"\x80\x04\x95pickle",
        b"omlx1:huey:" + b"0" * 64 + b':{"a":1}',
    ):
        with pytest.raises(ForgedMessage):
            signed.loads(forged)
    with pytest.raises(TypeError):
        signed.dumps({"a": object()})
