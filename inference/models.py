"""Database models of the inference app."""
from django.db import models


class StoredResponse(models.Model):
    """A finished Responses API response kept for ``previous_response_id`` and
    GET / DELETE /v1/responses/{id}.

    A conversation is a chain: each row keeps only its own ``input_items`` and points to the
    response it continued; the full context of a request is every row of the chain, oldest
    first, each row's input items followed by its output items. Rows stay until deleted.
    """

    id = models.CharField(max_length=64, primary_key=True)  # resp_<hex>
    created = models.DateTimeField(auto_now_add=True, db_index=True)
    model = models.CharField(max_length=255)
    previous_response_id = models.CharField(max_length=64, null=True, blank=True)
    input_items = models.JSONField()  # the request's input as Responses items (a string became a user message)
    body = models.JSONField()  # the Response object as it was returned

    class Meta:
        ordering = ["created"]

    def __str__(self) -> str:
        return f"{self.id} ({self.model})"
