"""Embedding and reranker models (``/v1/embeddings``, ``/v1/rerank``): BERT-family encoders in
MLX (``bert``), LLM-based ones on mlx-lm's classes (``encoder_model``), pooling (``pooling``)
and the batching engine the model pool loads for them (``engine``). docs/api.md says what the
endpoints accept; docs/models.md how folders are recognised.

This module imports no MLX: discovery reads the constants below in any process.
"""

BERT_MODEL_TYPES = ("bert", "roberta", "xlm-roberta", "camembert")  # inference.embedding.bert runs these
