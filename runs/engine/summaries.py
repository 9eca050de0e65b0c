"""Summaries through the model: the earlier passes of a loop whose `iteration_context_mode`
is SUMMARIZED (seed 000 §3.5.3), and the oldest items of a memory past its
`summarization_threshold` (§3.6.2).

A summary is a model call of the run like any other: the entity's model settings, a short
fixed system prompt, the output schema {"summary": string}. It is recorded the moment it
returns, in its own commit, under a step record of its own ("Summary", "Memory summary", type
SUMMARY: the trace shows the call as that step's), reused on a replay after a crash (never
paid twice), and counted against the run's budgets and max_llm_calls.

Earlier passes. Before a pass from the second on builds its first prompt, the passes kept in
the run state (HISTORY_KEY) are summarised once `summary_every_n_iterations` N of them (null:
1) have gathered since the last summary. The summary and how many passes it took in stay in
the run state (SUMMARY_KEY): the pass's other steps reuse it (one summary call per pass at
most), and a pass between two summaries sees the last one and the passes since, verbatim.
Each summary folds the one before it and the passes since. The call's key is per (run,
iteration, attempt).

A failed summary call fails the step that needed it, with the call's error: the retry policy
decides, as for the step's own model call (the next attempt summarises again, under its own
key). No room for it in a budget or a call limit stops the run BLOCKED or FAILED as the limit
says. There is no fallback to the model-free summary: the next pass would be shown something
other than its entity's settings promise, and nobody would know.

Memory. When a run has remembered its item and the memory holds more than N items (N the
threshold; expired items do not count), the oldest beyond the newest N-1 are folded into one
summary item (the previous summary among them), so N stay. The run's output is made by then:
a summary call that fails or has no room leaves the items as they are (the next run's fold
takes them) with a `memory.not_summarized` event saying why, and the run ends as it would
have. max_items applies after the fold (runs/engine/memory.py).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from runs.engine import loop, memory, thoughts
from runs.engine.outcomes import Failed, OverBudget
from runs.engine.ports import LLM_ERROR, MemoryEntry, MemoryFolded
from runs.engine.state import HISTORY_KEY, SUMMARY_KEY, Events, RunView, StepRecord

if TYPE_CHECKING:
    from runs.engine.core import Engine

# The schema's title names the request to the model (and lets the offline model recognise it).
SUMMARY_TITLE = "hierarch_summary"
SUMMARY_SCHEMA: dict[str, Any] = {
    "title": SUMMARY_TITLE,
    "type": "object",
    "properties": {"summary": {"type": "string", "minLength": 1}},
    "required": ["summary"],
    "additionalProperties": False,
}
PASSES_PROMPT = (
    "Summarise these earlier iterations for the next one: what each tried, what came of it, "
    "and what is still to do. Keep the facts, names and numbers the next iteration needs and "
    "leave out the rest. The iterations are between <earlier> and </earlier>; a summary of "
    "older ones may come first. Answer in a few sentences, as JSON: "
    '{"summary": "..."}.'
)
MEMORY_PROMPT = (
    "Summarise these earlier memory items for the later runs that will read the summary "
    "instead of them: keep the facts, names, numbers and decisions they may need, and leave "
    "out the rest. The items are between <earlier> and </earlier>, oldest first; a summary "
    "of older ones may come first. Answer in a few sentences, as JSON: "
    '{"summary": "..."}.'
)


def earlier_passes(run: RunView) -> list[Any] | str | None:
    """What a prompt shows of the earlier passes, as `iteration_context_mode` says; for
    SUMMARIZED, the last summary (`pass_summary`) and the passes since."""
    history = run.state.get(HISTORY_KEY) or []
    if not history:
        return None
    loop_control = run.definition["planning"]["loop_control"]
    text, summarised = _kept(run)
    return loop.iteration_context(
        history,
        loop_control["iteration_context_mode"],
        summarize=lambda passes: loop.summarized(passes, text, summarised),
    )


def pass_summary(engine: Engine, run: RunView) -> tuple[RunView, Failed | OverBudget | None]:
    """Summarise the earlier passes when it is time to (SUMMARIZED, N passes since the last
    summary): the run with the summary in its state, or why there is none."""
    loop_control = run.definition["planning"]["loop_control"]
    if loop_control.get("iteration_context_mode") != "SUMMARIZED":
        return run, None
    history = run.state.get(HISTORY_KEY) or []
    text, summarised = _kept(run)
    every = loop_control.get("summary_every_n_iterations")
    if not loop.summary_due(len(history), summarised, every):
        return run, None
    record = StepRecord(
        "summary",
        run.cursor,
        "Summary",
        "SUMMARY",
        "RUNNING",
        run.iteration,
        attempt=run.attempt,
        started_at=engine.clock.now(),
    ).with_input({"iterations": len(history), "summarised_before": summarised})
    material = loop.summarized(history, text, summarised)
    run, answer = summary_call(engine, run, record, PASSES_PROMPT, material)
    if isinstance(answer, OverBudget):
        record = record.failed(answer.limit.code, str(answer.limit))
        if answer.limit.blocks:
            record = record.waiting()
        return engine._later(run, [record], Events()), answer
    if isinstance(answer, Failed):
        record = record.failed(answer.code, answer.message)
        failed = Failed(
            answer.code,
            f"summarising the earlier iterations failed: {answer.message}",
            retryable=answer.retryable,
        )
        return engine._later(run, [record], Events()), failed
    run = run.with_state(**{SUMMARY_KEY: {"text": answer, "iterations": len(history)}})
    return engine._later(run, [record.completed({"summary": answer})], Events()), None


def remember(engine: Engine, run: RunView, content: Any) -> RunView:
    """Keep the run's item in its entity's memory, then fold the oldest items into a summary
    when the memory holds more than its threshold, then apply max_items. The run as the
    last record wrote it, with the fold's step record and event for its next write."""
    now = engine.clock.now()
    item = memory.remembering(run, content, now)
    if item is None:
        return run
    run = engine._record(run, item)
    query = memory.foldable(run, now)
    if query is None:
        return run
    entries = memory.to_fold(engine.store.recall(run, query))
    keep = memory.max_items(run)
    trim = MemoryFolded(item.scope, keep=keep)
    if not entries:
        return engine._record(run, trim) if keep else run
    record = StepRecord(
        "memory_summary",
        len(run.plan or []),
        "Memory summary",
        "SUMMARY",
        "RUNNING",
        run.iteration,
        attempt=run.attempt,
        started_at=now,
    ).with_input({"items": len(entries)})
    run, answer = summary_call(engine, run, record, MEMORY_PROMPT, _memory_material(entries))
    if isinstance(answer, str):
        newest, older = entries[-1], entries[:-1]
        content = memory.folded(answer, entries)
        fold = MemoryFolded(item.scope, newest.id, tuple(e.id for e in older), content, keep)
        run = engine._record(run, fold)
        record = record.completed({"summary": answer})
        run = run.noted("memory.summarized", items=len(entries), kept=query.skip)
        return engine._later(run, [record], Events())
    if isinstance(answer, OverBudget):
        code, reason = answer.limit.code, str(answer.limit)
    else:
        code, reason = answer.code, answer.message
    if keep:
        run = engine._record(run, trim)
    run = run.noted("memory.not_summarized", reason=reason)
    return engine._later(run, [record.failed(code, reason)], Events())


def summary_call(
    engine: Engine, run: RunView, record: StepRecord, instructions: str, material: str
) -> tuple[RunView, str | Failed | OverBudget]:
    """One summary call, recorded under `record`: the summary's text, or why there is none."""
    messages = (
        {"role": "system", "content": instructions},
        {"role": "user", "content": f"<earlier>\n{material}\n</earlier>"},
    )
    request = thoughts.model_request(
        engine, run, messages=messages, response_schema=SUMMARY_SCHEMA, purpose="SUMMARY"
    )
    run, reply = thoughts.call_model(engine, run, record, request)
    if isinstance(reply, Failed | OverBudget):
        return run, reply
    text = reply.parsed.get("summary") if isinstance(reply.parsed, dict) else None
    if not isinstance(text, str) or not text.strip():
        return run, Failed(
            LLM_ERROR, "the model did not answer the summary asked for", retryable=True
        )
    return run, text.strip()


def _kept(run: RunView) -> tuple[str | None, int]:
    """The last summary of earlier passes and how many passes it took in (None, 0: none)."""
    kept = run.state.get(SUMMARY_KEY)
    if not isinstance(kept, dict) or not isinstance(kept.get("text"), str):
        return None, 0
    summarised = kept.get("iterations")
    return kept["text"], summarised if isinstance(summarised, int) else 0


def _memory_material(entries: list[MemoryEntry]) -> str:
    """The items a fold takes, oldest first, as the summary call reads them."""
    lines = [
        f"Summary of earlier items: {entry.content[memory.SUMMARY]}"
        if memory.is_summary(entry.content)
        else "Item: " + json.dumps(entry.content, default=str, ensure_ascii=False, sort_keys=True)
        for entry in entries
    ]
    return "\n".join(lines)
