"""The OpenTelemetry export with a real Celery worker: the worker that ends a root run sends
the trace's spans as the `export_trace` task, to the endpoint of its own environment."""

from __future__ import annotations

import pytest

from runs.services import run_execute
from tests.factories import UserFactory, grant
from tests.reliability.hierarchies import action, thought
from tests.reliability.processes import wait_for_the_end
from tests.support.otlp import OtlpReceiver

pytestmark = pytest.mark.reliability


def test_a_worker_exports_the_trace_of_the_run_it_ends(processes, workspace):
    with OtlpReceiver() as receiver:
        processes.worker("w1", OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=receiver.endpoint)
        olive = grant(UserFactory(username="olive"), workspace, "operator")
        entity = action(workspace, "answer", thought(1, "Answer"))
        run, _ = run_execute(entity=entity, user=olive, input_data={})
        assert wait_for_the_end(run, processes, timeout=30).status == "COMPLETED"
        assert receiver.wait(1, timeout=30), "no trace arrived"
        processes.wait_idle()

    spans = receiver.spans()
    assert {span.trace_id for span in spans} == {run.trace_id.bytes}
    assert "invoke_agent answer" in [span.name for span in spans]
    assert "runs.tasks.export_trace" in processes.log("w1")
