from django.apps import AppConfig


class EntitiesConfig(AppConfig):
    name = "entities"
    default_auto_field = "django.db.models.BigAutoField"
