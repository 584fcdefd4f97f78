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
    input_items = (
        models.JSONField()
    )  # the request's input as Responses items (a string became a user message)
    body = models.JSONField()  # the Response object as it was returned

    class Meta:
        ordering = ["created"]

    def __str__(self) -> str:
        return f"{self.id} ({self.model})"


class ModelSettings(models.Model):
    """Per-model settings, keyed by the model's id (its folder, e.g. "org/name"). Every field is
    optional: None (or an empty dict) means "the server's default". Read by the model pool
    (alias, pin, TTL, kind) and by the worker for each request (sampling defaults, context
    limit, chat template kwargs, tool parser), so a change applies to the next request without a restart.
    """

    KINDS = [("llm", "llm"), ("embedding", "embedding"), ("reranker", "reranker")]

    model_id = models.CharField(max_length=255, primary_key=True)
    alias = models.CharField(max_length=255, null=True, blank=True, unique=True)
    pinned = models.BooleanField(default=False)  # never evicted; loaded at start
    ttl_seconds = models.FloatField(null=True, blank=True)  # unload after this long idle
    context_length = models.PositiveIntegerField(null=True, blank=True)  # prompt + output, in tokens
    model_type = models.CharField(max_length=16, choices=KINDS, null=True, blank=True)  # overrides discovery
    # Sampling defaults, used when a request leaves the parameter out.
    temperature = models.FloatField(null=True, blank=True)
    top_p = models.FloatField(null=True, blank=True)
    top_k = models.IntegerField(null=True, blank=True)
    min_p = models.FloatField(null=True, blank=True)
    max_tokens = models.PositiveIntegerField(null=True, blank=True)
    repetition_penalty = models.FloatField(null=True, blank=True)
    presence_penalty = models.FloatField(null=True, blank=True)
    frequency_penalty = models.FloatField(null=True, blank=True)
    priority = models.IntegerField(null=True, blank=True)  # lower is scheduled first
    # Scheduling of this model's engine (EngineConfig.LIVE), over the server-wide settings.
    max_batch_wait_ms = models.FloatField(null=True, blank=True)
    max_step_ms = models.FloatField(null=True, blank=True)
    # The KV format of this model's engine (EngineConfig.kv_bits, kv_group_size; kv_bits 0: float
    # KV whatever the server's), from its next load.
    kv_bits = models.PositiveSmallIntegerField(null=True, blank=True)
    kv_group_size = models.PositiveSmallIntegerField(null=True, blank=True)
    speculative = models.CharField(max_length=16, null=True, blank=True)  # "off", "lookup", "draft"
    num_draft_tokens = models.PositiveIntegerField(null=True, blank=True)
    # The served model id that drafts for this one (speculative "draft"), from its next load;
    # None: the server's --draft-model. inference.pool.drafts
    draft_model = models.CharField(max_length=255, null=True, blank=True)
    chat_template_kwargs = models.JSONField(default=dict, blank=True)  # under the request's own
    # The tool-call format to parse (a name of inference.chat.tool_parsers.FORMATS, or "none");
    # None: detected from the chat template, config and vocabulary.
    tool_parser = models.CharField(max_length=32, null=True, blank=True)
    updated = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return self.model_id


class ApiKey(models.Model):
    """A key made by `omlx keys create` or the console's Keys page (inference/keys/). Only the
    sha256 of the secret is kept: the secret is shown once, when it is made. The secret names its
    row (``omlx-<key_id>-<random>``), so a check finds one row and compares digests in constant
    time. ``scopes``: a list of inference/keys/scopes.py's names. Revoking deletes the row."""

    key_id = models.CharField(max_length=16, primary_key=True)  # public: shown, used to revoke
    name = models.CharField(max_length=64, unique=True)
    digest = models.CharField(max_length=64)  # sha256 hex of the whole secret
    scopes = models.JSONField(default=list)
    shares_cache = models.BooleanField(default=False)  # its requests use the shared (unsalted) cache
    created = models.DateTimeField(auto_now_add=True)
    last_used = models.DateTimeField(null=True, blank=True)  # to the minute (inference/keys/ring.py)

    class Meta:
        ordering = ["created"]
