"""Stored Responses older than OMLX_RESPONSE_TTL_DAYS are deleted (at start and by an hourly Huey
periodic task); younger ones stay."""

from datetime import timedelta

import pytest
from django.utils import timezone

from inference.api.responses.store import delete_expired
from inference.models import StoredResponse

pytestmark = pytest.mark.django_db


def test_expired_rows_are_deleted_and_the_task_is_scheduled():
    for name in ("old", "new"):
        StoredResponse.objects.create(id=name, model="tiny", input_items=[], body={"output": []})
    StoredResponse.objects.filter(id="old").update(created=timezone.now() - timedelta(days=31))
    assert delete_expired() == 1
    assert list(StoredResponse.objects.values_list("id", flat=True)) == ["new"]

    from huey.contrib.djhuey import HUEY

    import inference.tasks  # noqa: F401  (registers the periodic tasks)

    names = {type(task).__name__ for task in HUEY._registry.periodic_tasks}
    assert "delete_expired_responses" in names
