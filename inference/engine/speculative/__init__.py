"""Speculative decoding: drafters propose a few tokens per decoding row, the target model checks
them all in one forward pass of the decode batch, and every accepted token saves a step.

- ``drafter``: the ``Drafter`` interface every proposer implements; ``drafters``: them by name;
- ``prompt_lookup``: the n-gram drafter over the request's own prompt and output;
- ``suffix``: suffix decoding, which drafts from the model's earlier answers too
  (``suffix_tree``: the tree it drafts from; ``answers``: a model's answers per cache salt);
- ``acceptance``: which drafted tokens a row keeps (greedy match, rejection sampling);
- ``rollback``: removing the rejected positions from the batch's caches, a different number per row,
  for every kind of cache (full attention, sliding windows, recurrent state);
- ``policy``: which rows speculate this step and how many tokens each drafts (adaptive);
  ``width``: how wide the batch's verify pass is (the drafts cut to what pays);
- ``verify``: the speculative step of a decode batch, and its counters; ``batch_step``: that
  step as a part of the decode batch (the mixin ``SpeculativeSteps``).
"""

from .drafter import METHODS, Drafter
from .drafters import make_drafter
from .policy import SpeculationPolicy
from .verify import SpeculativeCounters, verify_step

__all__ = ["METHODS", "Drafter", "make_drafter", "SpeculationPolicy", "SpeculativeCounters", "verify_step"]
