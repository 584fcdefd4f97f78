"""A tool for the Responses API tests, shared by the unit and the live modules."""

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather of a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 12}},
        "required": ["city"],
    },
}  # bounded: a random-weight model never ends an unbounded string
