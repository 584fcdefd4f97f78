"""Chat on top of the engine: prompts rendered with the model's chat template (tools, template
kwargs), and the model's output split into answer text, reasoning and tool calls."""
