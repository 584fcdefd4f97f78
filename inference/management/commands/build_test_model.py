"""``manage.py build_test_model OUT_DIR``: write a random-weight model folder (inference.testkit)."""

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from inference.testkit.registry import ARCHITECTURES, TRANSFORMERS_BUILT, build_model, build_quantized
from inference.testkit.text import PRESETS


class Command(BaseCommand):
    help = (
        "Write a model folder in Hugging Face format with random weights and a small byte-level BPE "
        "tokenizer with the family's chat template, loadable by mlx-lm and transformers (or, with "
        "--quantize, an MLX-format quantized folder as mlx_lm.convert -q writes). For tests, "
        "benchmarks and demos; the same arguments always write the same files. "
        f"{', '.join(TRANSFORMERS_BUILT)} need torch and transformers (pip install 'omlx[test]')."
    )

    def add_arguments(self, parser):
        parser.add_argument("out_dir", help="folder to write the model to (created if missing)")
        parser.add_argument(
            "--arch",
            default="qwen2",
            choices=ARCHITECTURES,
            help="model_type of config.json (default: qwen2)",
        )
        parser.add_argument(
            "--preset",
            default="tiny",
            choices=list(PRESETS),
            help="size: "
            + "; ".join(f"{name}: {_describe(fields)}" for name, fields in PRESETS.items())
            + f" (llama, mistral, qwen2, qwen3; {', '.join(TRANSFORMERS_BUILT)} have tiny, and gemma3_text "
            "and qwen3_5 also qwen2.5-0.5b: see docs/cli.md)",
        )
        parser.add_argument(
            "--seed", type=int, default=0, help="seed of the weights and the tokenizer (default: 0)"
        )
        parser.add_argument(
            "--dtype",
            default="float32",
            choices=["float32", "bfloat16", "float16"],
            help="dtype of the stored weights (default: float32)",
        )
        parser.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="FIELD=VALUE",
            dest="overrides",
            help="override a config.json field; VALUE is parsed as JSON; repeatable "
            "(e.g. --set num_hidden_layers=4 --set tie_word_embeddings=true)",
        )
        parser.add_argument(
            "--quantize",
            type=int,
            choices=[4, 8],
            default=None,
            metavar="BITS",
            help="write an MLX-format folder quantized to 4 or 8 bits (mlx_lm.convert -q) instead",
        )
        parser.add_argument(
            "--group-size", type=int, default=64, help="quantization group size (default: 64)"
        )
        parser.add_argument(
            "--script",
            default=None,
            metavar="TEXT",
            help="instead of random weights: a model whose greedy output after the chat template's "
            "generation prompt is TEXT, then end-of-sequence (inference/testkit/scripted.py; "
            "llama, mistral, qwen2, qwen3; --preset, --set and --quantize do not apply)",
        )

    def handle(
        self, out_dir, arch, preset, seed, dtype, overrides, quantize, group_size, script=None, **options
    ):
        args = dict(arch=arch, preset=preset, seed=seed, dtype=dtype, **_parse(overrides))
        if script is not None and (quantize or overrides):
            raise CommandError("--script does not go with --quantize or --set")
        try:
            if script is not None:
                from inference.testkit.scripted import build_scripted_model

                path = build_scripted_model(out_dir, script, arch=arch, seed=seed, dtype=dtype)
                self.stdout.write(f"Wrote scripted {arch} model to {path.resolve()}")
                return
            if quantize:
                path = build_quantized(out_dir, quantize, group_size, **args)
            else:
                path = build_model(out_dir, **args)
        except (ValueError, ImportError) as e:
            raise CommandError(str(e)) from e
        if quantize:  # packed tensors: their element count is not the parameter count
            self.stdout.write(
                f"Wrote {arch} model ({preset}, {quantize}-bit, MLX format) to {path.resolve()}"
            )
            return
        params = _parameter_count(path)
        self.stdout.write(
            f"Wrote {arch} model ({preset}, {params / 1e6:.2f}M parameters, {dtype}) to {path.resolve()}"
        )


def _describe(fields):
    return (
        f"hidden {fields['hidden_size']}, {fields['num_hidden_layers']} layers, "
        f"{fields['num_attention_heads']}/{fields['num_key_value_heads']} heads, vocab {fields['vocab_size']}"
    )


def _parse(overrides):
    parsed = {}
    for item in overrides:
        field, sep, value = item.partition("=")
        if not sep:
            raise CommandError(f"--set expects FIELD=VALUE, got {item!r}")
        try:
            parsed[field] = json.loads(value)
        except json.JSONDecodeError:
            parsed[field] = value
    return parsed


def _parameter_count(path: Path) -> int:
    """Sum of the tensor sizes in the safetensors headers; no tensor data is read."""
    total = 0
    for file in path.glob("model*.safetensors"):
        with file.open("rb") as f:
            header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
        for name, entry in header.items():
            if name != "__metadata__":
                count = 1
                for size in entry["shape"]:
                    count *= size
                total += count
    return total
