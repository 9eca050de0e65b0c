"""PostgreSQL: a function that raises when a call's reservation finds no room in one of the
runs it counts for.

`runs/sql.py` `reserve` counts a call for a run and every ancestor in one UPDATE whose rows
each check their own limits. A row without room is left out, so the statement must not keep
the others: it ends with this function when fewer rows changed than it counts for, and the
error undoes the whole statement. SQLite checks in Python, in a transaction of its own.
"""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION hierarch_no_room(run_id text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'no room for a call of run % or an ancestor', run_id
        USING ERRCODE = 'HR003';
END
$$
"""
DROP = "DROP FUNCTION IF EXISTS hierarch_no_room(text)"


def create(apps, schema_editor):  # noqa: ANN001
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE, params=None)


def drop(apps, schema_editor):  # noqa: ANN001
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP, params=None)


class Migration(migrations.Migration):
    dependencies = [("runs", "0013_claim_refused_function")]

    operations = [migrations.RunPython(create, drop, elidable=False)]
