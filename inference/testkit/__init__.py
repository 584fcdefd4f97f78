"""The test-model kit: Hugging Face model folders with random (or scripted) weights, for tests,
benchmarks, ``omlx build-model`` and the demo model. Nothing here serves requests.

``registry.build_model`` is the one entry point; ``registry.BUILDERS`` maps each architecture to
the module that builds it:

- ``text``: llama, mistral, qwen2, qwen3, every weight written here (numpy only, no torch);
- ``hf``: sliding-window, hybrid linear-attention, Mamba2 and mixture-of-experts families, built
  with transformers' own classes;
- ``encoders``: embedding and reranker folders (BERT with transformers, Qwen3 from ``text``);
- ``vlm`` (LLaVA, and what the vision families share), ``vlm_qwen``, ``vlm_gemma3``,
  ``vlm_mistral3``: vision-language models, with transformers.

Beside them: ``scripted`` (``build_scripted_model``: a model that writes a given text, tool-call
markup and reasoning included), ``quantize`` (MLX-format 4- or 8-bit copies with mlx-lm's
converter), ``demo`` (the model ``omlx serve`` starts with when it has none), ``templates`` (each
family's chat template and special tokens), ``tokenizer`` (the byte-level BPE every folder gets)
and ``base`` (what the builders share). Builders import ``base`` and ``tokenizer``, never the
registry.

A built folder has the format of a checkpoint from the Hub: ``config.json`` with the fields
transformers uses for the ``model_type``, ``model.safetensors`` (or shards and
``model.safetensors.index.json`` past 2 GiB) with Hugging Face weight names,
``generation_config.json``, and a byte-level BPE tokenizer trained on a synthetic corpus
(``tokenizer.json``, ``tokenizer_config.json`` with the family's chat template,
``special_tokens_map.json``). The files are a pure function of the arguments: the same call writes
the same bytes on every machine. The families built with transformers need torch and transformers
(``pip install 'omlx[test]'``) and say so in one line without them; the hand-written ones, and so
the demo model, need neither.
"""
