"""python manage.py run_entity NAME --workspace SLUG --input JSON [--wait] [--user NAME]

With the inline executor (the embedded default) this process is the run's executor: it works
on the run, with or without --wait, until the run ends or waits (on a person, or on a timer
the server's sweeper keeps), and exits only once the work it handed to its threads (steps,
notifications) is done; a server beside it (`make run`) takes the run on from there. The links
it prints are the server's: HIERARCH_BASE_URL, which `make run` keeps in var/base_url.

With --wait it exits with a code per case: 0 the run completed; 1 it failed or was cancelled,
or did not end within --timeout (or the command was refused); 3 a run of it (the root or one
below it) waits on a person's decision; 4 a run of it is BLOCKED (a budget or a pass limit to
raise). For 3 and 4 it prints `needs_attention`: which run waits, why, and where to act.
"""

from __future__ import annotations

import json
import time

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from entities.models import Entity, Workspace
from runs import background
from runs.attention import run_attention
from runs.models import TERMINAL, Run, RunStatus
from runs.selectors import run_document, trace_tree
from runs.services import RunRefused, run_start

# The exit codes of --wait when the run waits on a person (0: completed; 1: anything else).
WAITS_ON_A_DECISION = 3
BLOCKED = 4


class Command(BaseCommand):
    help = (
        "Start a run of an entity. With --wait, wait for it to end and print the run (status, "
        "output, error, metrics) and its trace tree as JSON; when it, or a run below it, waits "
        "on a person, print `needs_attention`: what to do and where. Exit codes with --wait: "
        f"0 completed; 1 failed, cancelled or timed out; {WAITS_ON_A_DECISION} waits on a "
        f"person's decision; {BLOCKED} blocked (a budget or pass limit to raise)."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("name", help="entity name (or string id)")
        parser.add_argument("--workspace", required=True, help="workspace slug")
        parser.add_argument("--input", default="{}", help="the run input, a JSON object")
        parser.add_argument("--wait", action="store_true", help="wait for the run to end")
        parser.add_argument(
            "--timeout",
            type=float,
            default=300.0,
            help="seconds to wait for the run (and, without --wait, for this process's part "
            "of it; the server goes on with the rest)",
        )
        parser.add_argument(
            "--user",
            default=None,
            help="start the run as this user (their role and tool grants apply); default: a "
            "system run, which may call every tool",
        )

    def handle(
        self,
        *args,
        name: str,
        workspace: str,
        input: str,
        wait: bool,
        timeout: float,
        user: str | None = None,
        **options,
    ):
        target = Workspace.objects.filter(slug=workspace).first()
        if target is None:
            raise CommandError(f"there is no workspace {workspace!r}")
        entity = (
            Entity.objects.filter(workspace=target, name=name).first()
            or Entity.objects.filter(workspace=target, external_id=name).first()
        )
        if entity is None:
            raise CommandError(f"there is no entity {name!r} in workspace {workspace!r}")
        try:
            input_data = json.loads(input)
        except json.JSONDecodeError as exc:
            raise CommandError(
                f"--input is not valid JSON: {exc.msg} at character {exc.pos}"
            ) from None
        starter = None
        if user is not None:
            starter = get_user_model().objects.filter(username=user).first()
            if starter is None:
                raise CommandError(f"there is no user {user!r}")
        try:
            run = run_start(entity=entity, input_data=input_data, user=starter)
        except RunRefused as exc:
            raise CommandError(f"{exc.code}: {exc}") from None
        deadline = time.monotonic() + timeout
        try:
            self._report(run, wait=wait, timeout=timeout, deadline=deadline)
        finally:
            self._let_the_work_settle(run, deadline)

    def _needs_attention(self, run: Run, waiting: list) -> None:
        """Print what the run waits on a person for and exit with its code: BLOCKED when any
        run is blocked, else a decision."""
        printed: dict = {
            "run_id": str(run.pk),
            "status": run.status,
            "needs_attention": [item.as_json() for item in waiting],
        }
        decision = next((item for item in waiting if item.approval_id is not None), None)
        if decision is not None:
            printed["waits_on_a_person"] = {
                "approval_id": decision.approval_id,
                "trigger": decision.trigger,
                "step": decision.step,
                "decide_at": decision.act.console_url,
            }
        self.stdout.write(json.dumps(printed, indent=2, ensure_ascii=False))
        first = waiting[0]
        blocked = any(item.status == RunStatus.BLOCKED for item in waiting)
        raise CommandError(
            f"run {run.pk} waits on a person: {first.entity_name} {first.status} "
            f"({first.code}); {first.act.what}: {first.act.console_url}",
            returncode=BLOCKED if blocked else WAITS_ON_A_DECISION,
        )

    def _let_the_work_settle(self, run: Run, deadline: float) -> None:
        """Exit only once this process's threads are done with the run: a thread pool given
        work while the interpreter exits refuses it with a traceback, and the work is lost."""
        if background.settle(max(deadline - time.monotonic(), 0.0)):
            return
        background.quiesce(timeout=60.0)  # the steps under way end; no new one starts here
        self.stderr.write(
            f"run {run.pk} goes on in the server: this command stopped working on it at its "
            "--timeout"
        )

    def _report(self, run: Run, *, wait: bool, timeout: float, deadline: float) -> None:
        if not wait:
            self.stdout.write(json.dumps({"run_id": str(run.pk), "status": run.status}))
            return
        waiting: list = []
        while time.monotonic() < deadline:
            run.refresh_from_db()
            if run.status in TERMINAL:
                break
            waiting = run_attention(run)
            if waiting:
                break
            time.sleep(0.05)
        else:
            raise CommandError(f"run {run.pk} did not end within {timeout:g} s ({run.status})")
        if waiting:
            self._needs_attention(run, waiting)
            return
        run = Run.objects.select_related("entity").get(pk=run.pk)
        document = {"run": run_document(run), **trace_tree(run)}
        self.stdout.write(json.dumps(document, indent=2, ensure_ascii=False, default=str))
        if run.status != "COMPLETED":
            raise CommandError(
                f"run {run.pk} ended {run.status}: {run.error_code} {run.error_message}"
            )
