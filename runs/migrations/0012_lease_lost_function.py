"""PostgreSQL: a function that raises when a worker writes a run whose lease it lost.

A step's write is sent to the database whole, BEGIN to COMMIT, in one round trip (runs/sql.py
`one_trip`): the lease check cannot wait for the worker to read an answer, so the fenced
statements call this function when they find the lease is someone else's, and the error
aborts the transaction on the server. SQLite has no pipeline and checks in Python.
"""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION hierarch_lease_lost(run_id text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'run % is held by another worker', run_id USING ERRCODE = 'HR001';
END
$$
"""
DROP = "DROP FUNCTION IF EXISTS hierarch_lease_lost(text)"


def create(apps, schema_editor):  # noqa: ANN001
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE, params=None)


def drop(apps, schema_editor):  # noqa: ANN001
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP, params=None)


class Migration(migrations.Migration):
    dependencies = [("runs", "0011_root_runs_by_end")]

    operations = [migrations.RunPython(create, drop, elidable=False)]
