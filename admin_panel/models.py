"""Database models of the admin_panel app."""

from django.db import models


class BenchmarkRun(models.Model):
    """One benchmark of the admin page (``admin_panel.tasks.run_benchmark_task``).

    Life: queued (the page created it and queued the task) -> running (a worker took it;
    ``progress_*`` move) -> done (``results``: ``inference.bench.run_benchmark``'s, kept to
    compare runs) or failed (``error`` says why). A run left unfinished by a server that stopped
    (or, in Redis mode, by a worker process that stopped: ``worker`` has no heartbeat) is marked
    failed ("interrupted").
    """

    QUEUED, RUNNING, DONE, FAILED = "queued", "running", "done", "failed"
    STATUSES = [(s, s) for s in (QUEUED, RUNNING, DONE, FAILED)]
    ACTIVE = (QUEUED, RUNNING)

    created = models.DateTimeField(auto_now_add=True)
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=STATUSES, default=QUEUED, db_index=True)
    model = models.CharField(max_length=512)
    target = models.CharField(max_length=512, default="local")  # "local" or the URL benchmarked
    settings = models.JSONField(default=dict)  # BenchSettings.to_dict() (+ "preset")
    results = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    progress_done = models.IntegerField(default=0)
    progress_total = models.IntegerField(default=0)
    progress_message = models.CharField(max_length=200, blank=True, default="")
    worker = models.CharField(max_length=200, blank=True, default="")  # the process running it (host:pid)

    class Meta:
        ordering = ["-created"]

    def __str__(self):
        return f"benchmark #{self.pk} of {self.model} ({self.status})"

    @property
    def percent(self) -> int:
        if self.status == self.DONE:
            return 100
        return int(100 * self.progress_done / self.progress_total) if self.progress_total else 0
