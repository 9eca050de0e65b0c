"""Tools a REACT agent uses in the reasoning loop's tests (tests/engine/test_reasoning_loop.py,
tests/api/test_react_api.py): two simulated READ tools whose descriptions share no word."""

from __future__ import annotations

from tests.factories import tool_definition

REACT = {"reasoning_config": {"reasoning_mode": "REACT"}}
QUESTION = {"city": "Paris", "question": "What is the weather like there tomorrow?"}


def weather_tool() -> dict:
    return tool_definition(
        "weather_lookup",
        implementation="simulated",
        function_schema={
            "name": "weather_lookup",
            "description": "Look up the weather forecast of a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
        output_schema={
            "type": "object",
            "properties": {"forecast": {"type": "string"}, "celsius": {"type": "integer"}},
            "required": ["forecast", "celsius"],
        },
    )


def stock_tool() -> dict:
    return tool_definition(
        "stock_price",
        implementation="simulated",
        function_schema={
            "name": "stock_price",
            "description": "Get the share price of a listed company by its ticker",
            "parameters": {
                "type": "object",
                "properties": {"ticker": {"type": "string"}},
                "required": ["ticker"],
            },
        },
        output_schema={
            "type": "object",
            "properties": {"usd": {"type": "number"}},
            "required": ["usd"],
        },
    )
