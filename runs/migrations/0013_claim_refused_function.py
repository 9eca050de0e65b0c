"""PostgreSQL: a function that raises when a worker's claim of a waiting run it wrote itself
finds the run changed.

A worker that ends a run's only child goes on with the parent itself and sends the child's
end together with the parent's next write, in one transaction (runs/store.py, the deferred
end). That transaction first takes the parent's lease on the condition that the parent is
still as the worker left it (waiting at the same step, no cancel asked, the same deadline);
otherwise this function aborts the whole transaction on the server, and the worker writes
the child's end alone and hints the parent to any worker. SQLite checks in Python.
"""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION hierarch_claim_refused(run_id text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'run % changed since this worker left it waiting', run_id
        USING ERRCODE = 'HR002';
END
$$
"""
DROP = "DROP FUNCTION IF EXISTS hierarch_claim_refused(text)"


def create(apps, schema_editor):  # noqa: ANN001
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE, params=None)


def drop(apps, schema_editor):  # noqa: ANN001
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP, params=None)


class Migration(migrations.Migration):
    dependencies = [("runs", "0012_lease_lost_function")]

    operations = [migrations.RunPython(create, drop, elidable=False)]
