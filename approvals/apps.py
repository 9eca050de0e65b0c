from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Runs sit below approvals and never import it: they reach people through the desk
        # handed over here (runs/approval_desk.py). Imported here because the desk's
        # services import the models, which Django loads only once the apps are ready.
        from approvals.desk import Desk
        from runs.approval_desk import approval_desk_install

        approval_desk_install(Desk())
