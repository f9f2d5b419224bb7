from django.apps import AppConfig


class MonitoringConfig(AppConfig):
    name = "monitoring"
    verbose_name = "Monitoring"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django_q.signals import post_execute

        from monitoring import counters

        post_execute.connect(counters.count_job, dispatch_uid="count-jobs")
