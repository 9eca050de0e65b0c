"""ASGI entry point: HTTP through Django, websockets through Channels (served by daphne)."""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

# Django must be set up before anything imports models.
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402

from config.middleware import RememberLoop  # noqa: E402
from config.routing import websocket_urlpatterns  # noqa: E402

if settings.HIERARCH_EXECUTOR == "inline":
    # The server process is the executor: it also sweeps (at once, then every
    # HIERARCH_ENGINE["SWEEP_SECONDS"]), so runs a killed or restarted server left behind resume.
    from approvals.timers import start_approval_timer
    from runs.gateway import warm_up
    from runs.sweeper import start_inline_sweeper

    start_inline_sweeper()
    start_approval_timer()
    warm_up()  # the model library's import, before the first run needs it

if settings.HIERARCH_LIVE_RELAY["ENABLED"]:
    # No Redis: the in-memory layer reaches this process's sockets only; the relay brings in
    # what other processes (manage.py run_entity, a worker) broadcast.
    from runs.relay import start_live_relay

    start_live_relay()


application = RememberLoop(
    ProtocolTypeRouter(
        {
            "http": django_asgi_app,
            "websocket": AllowedHostsOriginValidator(
                AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
            ),
        }
    )
)
