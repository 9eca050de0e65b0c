"""Custom metrics (`observability.metrics.custom_metrics`): read from a run's output when it
ends and kept per run, on the real engine and store; what counts as a number."""

from __future__ import annotations

import math

import pytest

from runs.metrics import custom_metric_rows, metric_number, tracked
from runs.models import Run, RunMetric
from tests.factories import EntityFactory
from tests.support.runs import Driver, io

pytestmark = pytest.mark.smoke


def metrics(*names: str, aggregation: str = "AVG") -> dict:
    return {
        "metrics": {
            "custom_metrics": [{"metric_name": n, "aggregation": aggregation} for n in names]
        }
    }


@pytest.fixture
def driver(db):
    return Driver()


def recorded(run: Run) -> dict[str, float]:
    return dict(RunMetric.objects.filter(run=run).values_list("name", "value"))


def test_it_records_the_number_the_output_holds_at_the_metrics_name(driver, acme):
    scorer = EntityFactory(
        workspace=acme,
        name="scorer",
        io_contract=io(None, score="number", label="string"),
        observability=metrics("score", "label", "absent"),
    )
    run = driver.run(scorer, {})

    assert run.status == "COMPLETED", (run.error_code, run.error_message)
    # the number is recorded; the string and the missing key record nothing
    assert recorded(run) == {"score": float(run.output_data["score"])}
    row = RunMetric.objects.get(run=run)
    assert (row.workspace_id, row.entity_id) == (acme.pk, scorer.pk)
    assert row.recorded_at == run.completed_at


def test_a_childs_metrics_are_recorded_when_its_end_goes_in_with_its_parents_write(driver, acme):
    # With handoff (as the server wires the engine), an only child's end is held back to go
    # with its parent's next write (the store's deferred end): its metrics go with it.
    driver.engine.handoff_s = 1.0
    child = EntityFactory(
        workspace=acme,
        name="child_scorer",
        io_contract=io(None, score="integer"),
        observability=metrics("score", aggregation="SUM"),
    )
    parent = EntityFactory(
        workspace=acme,
        name="parent",
        type="SKILL",
        children=[child],
        io_contract=io(None, score="integer"),
    )
    run = driver.run(parent, {})

    assert run.status == "COMPLETED", (run.error_code, run.error_message)
    child_run = Run.objects.get(parent=run)
    assert recorded(child_run) == {"score": float(child_run.output_data["score"])}
    assert recorded(run) == {}  # the parent declares no custom metric


def test_an_entity_without_custom_metrics_records_nothing(driver, acme):
    plain = EntityFactory(workspace=acme, name="plain", io_contract=io(None, score="number"))
    run = driver.run(plain, {})

    assert run.status == "COMPLETED"
    assert not RunMetric.objects.exists()


@pytest.mark.parametrize(
    ("output", "name", "expected"),
    [
        ({"score": 3}, "score", 3.0),
        ({"score": -0.25}, "score", -0.25),
        ({"quality": {"score": 0.9}}, "quality.score", 0.9),
        ({"quality.score": 2, "quality": {"score": 9}}, "quality.score", 2.0),  # the key first
        ({"score": "0.9"}, "score", None),  # a string, even of a number
        ({"score": True}, "score", None),  # a bool is not a measure
        ({"score": None}, "score", None),
        ({"score": [1, 2]}, "score", None),
        ({"score": math.nan}, "score", None),
        ({"score": math.inf}, "score", None),
        ({"score": 10**400}, "score", None),  # too large for a float
        ({"score": 2e15}, "score", None),  # beyond LARGEST
        ({"other": 1}, "score", None),
        ({"quality": 1}, "quality.score", None),
        ({"quality": {"other": 1}}, "quality.score", None),
        (None, "score", None),
        ("text", "score", None),
    ],
)
def test_only_a_finite_number_at_the_name_is_a_metric(output, name, expected):
    assert metric_number(output, name) == expected


def test_it_reads_at_most_twenty_metrics_and_each_name_once():
    declared = [{"metric_name": f"m{i}", "aggregation": "SUM"} for i in range(25)]
    declared.append({"metric_name": "m0", "aggregation": "MAX"})
    output = {f"m{i}": i for i in range(25)}
    rows = custom_metric_rows(
        definition={"observability": {"metrics": {"custom_metrics": declared}}},
        output=output,
        run_id="r",
        workspace_id=1,
        entity_id="e",
        now=None,
    )
    assert [row["name"] for row in rows] == [f"m{i}" for i in range(20)]


def test_names_that_are_one_once_cut_to_the_column_make_one_row():
    # Definitions saved before validation bounded the names: the column keeps 100 characters.
    long = "a" * 100
    declared = [{"metric_name": long + suffix, "aggregation": "SUM"} for suffix in ("b", "c")]
    rows = custom_metric_rows(
        definition={"observability": {"metrics": {"custom_metrics": declared}}},
        output={long + "b": 1, long + "c": 2},
        run_id="r",
        workspace_id=1,
        entity_id="e",
        now=None,
    )
    assert [(row["name"], row["value"]) for row in rows] == [(long, 1.0)]


def test_every_figure_is_tracked_unless_turned_off():
    assert tracked(None) == {"track_latency": True, "track_token_usage": True, "track_cost": True}
    off = {"observability": {"metrics": {"track_cost": False, "track_latency": True}}}
    assert tracked(off) == {"track_latency": True, "track_token_usage": True, "track_cost": False}
