from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class RunsConfig(AppConfig):
    name = "runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The executors, webhooks and trace exports sit below the services and the Celery
        # tasks that call them, so they are handed what to call here rather than importing
        # it. Imported here because these modules import the models, which Django loads only
        # once apps are ready.
        from runs import executors, services, tasks, tracing, webhooks

        executors.executor_install(advance=services.run_advance, advance_task=tasks.advance_run)
        webhooks.webhook_hints_install(deliver_task=tasks.deliver_webhook)
        tracing.trace_hints_install(export_task=tasks.export_trace)
        post_migrate.connect(analyze_after_migrate, sender=self, dispatch_uid="runs-analyze")


def analyze_after_migrate(*, using: str, plan: Any = None, **kwargs: Any) -> None:
    """Once `migrate` applied migrations, the runs tables get fresh planner statistics
    (PostgreSQL; `runs.sql.analyze`): a new database starts with plans made on what it holds,
    not on none. Not after a flush (no plan): the tables are empty again."""
    if plan:
        from runs import sql  # its models are ready only once the apps are

        sql.analyze(grown_only=False, using=using)
