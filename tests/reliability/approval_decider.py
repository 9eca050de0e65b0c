"""One approver's process in the approval race (tests/reliability/test_approval_race.py).

    python -m tests.reliability.approval_decider --barrier DIR --name one --user dave
        --decision approve --approvals 11,12,13

Sets Django up against the environment's DATABASE_URL, loads the user and warms its
permissions and connection, says it is ready (a file in DIR), then for each approval in turn:
waits for the round's `go-<i>` file, which holds the moment to start (the same for every
process); loads the request (still open, as an inbox page shows it); sleeps until that moment;
calls `approval_decide`; prints one line `RESULT {json}` saying what happened and when.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def wait_for(path: Path, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            sys.exit(f"{path.name} never came")
        time.sleep(0.002)
    return path.read_text()  # written whole, then renamed into place


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--barrier", type=Path, required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--user", required=True)
    parser.add_argument("--decision", required=True)
    parser.add_argument("--approvals", required=True)
    options = parser.parse_args()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.db import connection

    from approvals.models import Approval
    from approvals.services import AlreadyDecided, approval_decide, can_decide

    user = get_user_model().objects.get(username=options.user)
    connection.ensure_connection()
    (options.barrier / f"ready-{options.name}").touch()

    for index, pk in enumerate(int(pk) for pk in options.approvals.split(",")):
        start_at = float(wait_for(options.barrier / f"go-{index}"))
        approval = Approval.objects.select_related("workspace").get(pk=pk)
        assert approval.is_open and can_decide(user, approval)  # warms the permission cache
        while (left := start_at - time.time()) > 0:
            time.sleep(min(left, 0.001) if left < 0.01 else left - 0.01)
        started = time.time()
        result: dict = {"round": index, "name": options.name, "user": options.user}
        try:
            decided = approval_decide(
                approval=approval, user=user, decision=options.decision, notes=options.name
            )
        except AlreadyDecided as refused:
            result.update(outcome="refused", code=refused.code, message=str(refused))
        else:
            result.update(outcome="decided", status=decided.status)
        result.update(started=started, ended=time.time())
        print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
