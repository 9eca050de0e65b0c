from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The executors and webhooks sit below the services and the Celery tasks that call
        # them, so they are handed what to call here rather than importing it. Imported here
        # because these modules import the models, which Django loads only once apps are ready.
        from runs import executors, services, tasks, webhooks

        executors.executor_install(advance=services.run_advance, advance_task=tasks.advance_run)
        webhooks.webhook_hints_install(deliver_task=tasks.deliver_webhook)
