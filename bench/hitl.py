"""Human-in-the-loop speed: a request reaching an open inbox, and a decision reaching the worker.

    .venv/bin/python bench/hitl.py [--samples 30] [--warmup 3] [--backlog 0] [--json]

Everything runs as in production, on loopback: the console (daphne serving
config.asgi:application with HIERARCH_EXECUTOR=celery), one Celery worker (prefork, two
processes), PostgreSQL (DATABASE_URL; by default a fresh database created and dropped here),
Redis (REDIS_URL for the channel layer, default db 8; CELERY_BROKER_URL, default db 9) and an
approver's inbox open in Debian's Chromium, driven by Playwright.

Each sample starts a run (by an operator, `run_start`) of an ACTION whose only step is a
template_render TOOL_CALL behind a BEFORE_TOOL_CALL checkpoint, and measures:

- inbox_visible: from the Approval's `requested_at` (the worker's clock when it opened the
  request) to the moment its row `#approval-<id>` entered the inbox page's DOM, pushed over
  `/ws/approvals/` (a MutationObserver in the page records `Date.now()`);
- approve_to_next_step: the approver opens the request in a second tab and clicks Approve;
  from the decision's `responded_at` (the server's clock) to the first event the worker
  appended for the run after it: `tool.call`, written as the resumed step's tool returns
  (template_render takes 0-5 ms, so this is the step's start within that). Both are database
  timestamps. click_to_next_step measures from the click itself (the page's clock), so it
  adds the decision's HTTP round trip.

All clocks are this machine's wall clock: the browser, the worker and the server. `--backlog K`
leaves K other requests open in the inbox first (each push re-renders the open list). Prints a
summary, or one JSON line with --json (inbox_visible_ms_p50/p95/max,
approve_to_next_step_ms_p50/p95/max, click_to_next_step_ms_*, samples, misses, load_1m).
Every process started here is stopped on the way out, also on an error or SIGTERM; the
database created here is dropped (a DATABASE_URL given keeps the bench's workspace and runs,
as bench/engine.py does).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import sys
import tempfile
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from harness import (  # noqa: E402 - bench/harness.py
    Processes,
    database_create,
    database_drop,
    free_port,
    summary,
    until_up,
    wait_for,
)

CHROMIUM = "/usr/bin/chromium"
PASSWORD = "bench-" + secrets.token_hex(8)
TOOL = {
    "tool_id": "render",
    "name": "Render",
    "description": "Renders a fixed greeting.",
    "provider": "internal",
    "implementation": "template_render",
    "function_schema": {
        "name": "render",
        "description": "Render a template with variables.",
        "parameters": {
            "type": "object",
            "properties": {"template": {"type": "string"}, "variables": {"type": "object"}},
            "required": ["template"],
        },
    },
    "permissions": "READ",
}
# Records when each inbox row first enters the DOM, and when the page's websocket opened.
OBSERVER = """
window.hierarchSeen = {};
const hierarchRecord = (root) => {
  const now = Date.now();
  const rows = root.matches && root.matches('tr[id^="approval-"]')
    ? [root] : (root.querySelectorAll ? root.querySelectorAll('tr[id^="approval-"]') : []);
  for (const row of rows) {
    const id = row.id.slice('approval-'.length);
    if (!(id in window.hierarchSeen)) window.hierarchSeen[id] = now;
  }
};
new MutationObserver((mutations) => {
  for (const m of mutations) for (const node of m.addedNodes) hierarchRecord(node);
}).observe(document, {childList: true, subtree: true});
document.addEventListener('htmx:wsOpen', () => { window.hierarchLive = true });
document.addEventListener('click', () => { window.hierarchClickedAt = Date.now() }, true);
"""


def definition(name: str) -> dict:
    """An ACTION with one template_render step (fixed arguments, no model call) behind a
    BEFORE_TOOL_CALL checkpoint."""
    return {
        "metadata": {"type": "ACTION", "status": "ACTIVE", "tags": []},
        "identity": {
            "name": name,
            "description": "Renders a greeting once a person approves.",
            "persona": {"system_prompt": "You render greetings."},
        },
        "hierarchy": {"children": []},
        "capabilities": {"tools": [TOOL]},
        "planning": {
            "static_plan": {
                "enabled": True,
                "steps": [
                    {
                        "step_id": "s1",
                        "order": 1,
                        "name": "Render",
                        "type": "TOOL_CALL",
                        "target": {"tool_id": "render"},
                        "input_mapping": {"template": "hello", "variables": {}},
                    }
                ],
            }
        },
        "io_contract": {
            "output": {"schema": {"type": "object", "properties": {"text": {"type": "string"}}}}
        },
        "governance": {
            "human_oversight": {"hitl_checkpoints": [{"trigger": "BEFORE_TOOL_CALL"}]},
            "execution_limits": {"max_recursion_depth": 5},
        },
    }


# -- the environment ---------------------------------------------------------------------------


def child_environment(var_dir: str) -> dict[str, str]:
    """The server's and the worker's environment (and this process's): production settings
    over plain HTTP on loopback, as `make run` serves them."""
    return {
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DEBUG": os.environ.get("DEBUG", "0"),
        "SECRET_KEY": os.environ.get("SECRET_KEY", "bench-only-" + "k" * 50),
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "SECURE_SSL_REDIRECT": "0",
        "SESSION_COOKIE_SECURE": "0",
        "CSRF_COOKIE_SECURE": "0",
        "SECURE_HSTS_SECONDS": "0",
        "SECURE_HSTS_INCLUDE_SUBDOMAINS": "0",
        "SECURE_HSTS_PRELOAD": "0",
        "HIERARCH_EXECUTOR": "celery",
        "HIERARCH_VAR_DIR": var_dir,  # collected static files; the repository's var/ untouched
        "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/8"),
        "CELERY_BROKER_URL": os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/9"),
        "DATABASE_URL": os.environ["DATABASE_URL"],
        "PYTHONPATH": str(ROOT),
    }


# -- the measurements --------------------------------------------------------------------------


def epoch_ms(moment: datetime) -> float:
    return moment.timestamp() * 1000


def next_step_after(run_id: Any, responded_at: datetime) -> dict[str, Any]:
    """The worker's first write for the run after the decision: the events it appended
    (the decision's own `approval.*` events are the server's and are left out). For this
    entity the first is `tool.call`, appended the moment the resumed tool step's call
    returns, in its own commit; the step's StepRun row is the one opened before the pause,
    so it has no new start time to read."""
    from runs.models import RunEvent

    events = list(
        RunEvent.objects.filter(run_id=run_id, created_at__gt=responded_at)
        .exclude(type__startswith="approval.")
        .order_by("seq")
        .values_list("type", "created_at")
    )
    return {
        "first_event": events[0][0] if events else None,
        "events": [kind for kind, _ in events],
        "next_step_at": events[0][1] if events else None,
    }


def watch(page: Any, problems: list[str], *, socket_closes: bool) -> None:
    """Note what the browser sees go wrong on a page: script and console errors, failed
    loads and (on the inbox, which never navigates away) a websocket that closes."""
    page.on("pageerror", lambda error: problems.append(f"script error: {error}"))

    def console(message: Any) -> None:
        # A failed load is a response, noted below (but for /favicon.ico: none is served).
        if message.type == "error" and not message.text.startswith("Failed to load resource"):
            problems.append(f"console error on {page.url}: {message.text}")

    def response(answer: Any) -> None:
        if answer.status >= 400:
            problems.append(f"{answer.status} {answer.request.method} {answer.url}")

    def websocket(socket: Any) -> None:
        socket.on("close", lambda ws: problems.append(f"websocket closed: {ws.url}"))

    page.on("console", console)
    page.on("response", response)
    if socket_closes:
        page.on("websocket", websocket)


def measure(args: argparse.Namespace, base_url: str, processes: Processes) -> dict[str, Any]:
    from django.contrib.auth import get_user_model
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    from approvals.models import Approval
    from entities.models import Workspace
    from entities.services import entity_save
    from governance.permissions import membership_grant
    from runs.models import TERMINAL, Run
    from runs.services import run_start

    tag = secrets.token_hex(4)
    workspace = Workspace.objects.create(name="Bench HITL", slug=f"bench-hitl-{tag}")
    users = get_user_model().objects
    approver = users.create_user(f"approver-{tag}", password=PASSWORD, is_staff=True)
    operator = users.create_user(f"operator-{tag}", password=PASSWORD)
    membership_grant(workspace=workspace, user=approver, role="approver")
    membership_grant(workspace=workspace, user=operator, role="operator")
    entity = entity_save(workspace=workspace, definition=definition("greeter")).entity

    def start() -> tuple[Run, Approval]:
        run = run_start(entity=entity, input_data={}, user=operator)

        def asked() -> Approval | None:
            return Approval.objects.filter(run_id=run.pk).first()

        return run, wait_for(asked, args.timeout, f"run {run.pk} to ask", processes)

    def finished(run: Run) -> Run:
        def ended() -> Run | None:
            run.refresh_from_db(fields=["status", "error_code", "error_message"])
            return run if run.status in TERMINAL else None

        return wait_for(ended, args.timeout, f"run {run.pk} to finish", processes)

    for _ in range(args.backlog):  # requests left open, so each push renders a longer list
        start()

    visible: list[float] = []
    decided: list[float] = []
    clicked: list[float] = []
    notes: list[str] = []
    problems: list[str] = []
    first_events: dict[str, int] = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        try:
            context = browser.new_context(base_url=base_url)
            context.set_default_timeout(args.timeout * 1000)
            context.add_init_script(OBSERVER)
            inbox, detail = context.new_page(), context.new_page()
            watch(inbox, problems, socket_closes=True)
            watch(detail, problems, socket_closes=False)
            inbox.goto("/admin/login/?next=/approvals/")
            inbox.fill("#id_username", approver.username)
            inbox.fill("#id_password", PASSWORD)
            inbox.click("input[type=submit]")
            inbox.wait_for_url("**/approvals/")
            inbox.wait_for_function("window.hierarchLive === true")
            for index in range(args.warmup + args.samples):
                counted = index >= args.warmup
                run, approval = start()
                # 1. The row appears in the open inbox, pushed over its websocket.
                try:
                    inbox.wait_for_function(
                        "id => id in window.hierarchSeen", arg=str(approval.pk), polling=10
                    )
                    seen = inbox.evaluate("id => window.hierarchSeen[id]", str(approval.pk))
                    shown: float | None = seen - epoch_ms(approval.requested_at)
                except PlaywrightError as error:  # a miss is a figure, not a crash
                    notes.append(f"request {approval.pk} never reached the inbox: {error}")
                    shown = None
                # 2. Approve it on its page; the worker takes the step up again.
                detail.goto(f"/approvals/{approval.pk}/")
                with detail.expect_response(lambda r: r.url.endswith("/decision/")) as posted:
                    detail.get_by_role("button", name="Approve", exact=True).click()
                if posted.value.status != 200:
                    raise SystemExit(f"the approve click answered {posted.value.status}")
                click_at = detail.evaluate("window.hierarchClickedAt")
                run = finished(run)
                if run.status != "COMPLETED":
                    raise SystemExit(f"run {run.pk} ended {run.status}: {run.error_message}")
                approval.refresh_from_db(fields=["responded_at"])
                after = next_step_after(run.pk, approval.responded_at)
                step_at = after["next_step_at"]
                took = (
                    None if step_at is None else epoch_ms(step_at) - epoch_ms(approval.responded_at)
                )
                if args.verbose:
                    print(
                        f"  {'sample' if counted else 'warm-up'} {index}: inbox "
                        f"{'-' if shown is None else round(shown)} ms, next step "
                        f"{'-' if took is None else round(took)} ms; the worker wrote "
                        + " ".join(after["events"]),
                        file=sys.stderr,
                    )
                if not counted:
                    continue
                if shown is not None:
                    visible.append(shown)
                first = after["first_event"]
                first_events[first] = first_events.get(first, 0) + 1
                if took is None:
                    notes.append(f"run {run.pk}: the worker wrote nothing after the decision")
                    continue
                decided.append(took)
                clicked.append(epoch_ms(step_at) - click_at)
        finally:
            browser.close()
    return {
        "visible": visible,
        "decided": decided,
        "clicked": clicked,
        "notes": notes + list(dict.fromkeys(problems)),
        "first_events": first_events,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3, help="unmeasured runs first")
    parser.add_argument("--backlog", type=int, default=0, help="other requests left open")
    parser.add_argument("--timeout", type=float, default=20, help="seconds for any one wait")
    parser.add_argument("--verbose", action="store_true", help="print each run's events")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not Path(CHROMIUM).exists():
        raise SystemExit(f"{CHROMIUM} is missing: apt-get install chromium")

    # Stop cleanly (processes, database) when told to stop.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with ExitStack() as stack:
        if not os.environ.get("DATABASE_URL"):
            os.environ["DATABASE_URL"] = database_create("hitl")
            stack.callback(database_drop, os.environ["DATABASE_URL"])
        var_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-hitl-"))
        env = child_environment(var_dir)
        os.environ.update(env)
        # Playwright's sync API runs an event loop in this thread; the ORM calls in between
        # are synchronous all the same.
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connection, connections

        stack.callback(connections.close_all)  # before the database is dropped
        call_command("migrate", verbosity=0)
        call_command("collectstatic", interactive=False, verbosity=0)

        processes = Processes(env, var_dir)
        stack.callback(processes.stop_all)
        port = free_port()
        processes.start(
            "daphne",
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)]
            + ["config.asgi:application"],
        )
        processes.start(
            "celery",
            [sys.executable, "-m", "celery", "-A", "config", "worker", "-c", "2"]
            + ["--pool", "prefork", "-l", "warning", "-n", f"bench-hitl-{port}@%h"],
        )
        base_url = f"http://127.0.0.1:{port}"
        until_up(base_url, processes)
        load_before = os.getloadavg()[0]
        figures = measure(args, base_url, processes)

    visible, decided, clicked = (summary(figures[k]) for k in ("visible", "decided", "clicked"))
    result = {
        "database": connection.vendor,
        "samples": len(figures["decided"]),
        "backlog": args.backlog,
        "inbox_visible_ms_p50": visible["p50"],
        "inbox_visible_ms_p95": visible["p95"],
        "inbox_visible_ms_max": visible["max"],
        "approve_to_next_step_ms_p50": decided["p50"],
        "approve_to_next_step_ms_p95": decided["p95"],
        "approve_to_next_step_ms_max": decided["max"],
        "click_to_next_step_ms_p50": clicked["p50"],
        "click_to_next_step_ms_p95": clicked["p95"],
        "click_to_next_step_ms_max": clicked["max"],
        "misses": figures["notes"],
        # Other work on the machine (two cores here) moves these figures: say how busy it was.
        "load_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"{result['samples']} approvals on {result['database']}, Celery prefork x2, "
        f"{args.backlog} other requests open; load {result['load_1m'][0]} → "
        f"{result['load_1m'][1]} on {os.cpu_count()} cores"
    )
    print(f"{'':<34}{'p50 ms':>9}{'p95 ms':>9}{'max ms':>9}{'target':>10}")
    rows = [
        ("checkpoint → row in the inbox", visible, "< 1000"),
        ("approve → next step (DB clocks)", decided, "< 500"),
        ("click → next step (page clock)", clicked, ""),
    ]
    for label, numbers, target in rows:
        print(
            f"{label:<34}{numbers['p50'] or 0:>9.1f}{numbers['p95'] or 0:>9.1f}"
            f"{numbers['max'] or 0:>9.1f}{target:>10}"
        )
    print(f"  the first thing the worker wrote after a decision: {figures['first_events']}")
    for note in figures["notes"]:
        print(f"  {note}")


if __name__ == "__main__":
    main()
