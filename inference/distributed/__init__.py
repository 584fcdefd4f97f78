"""One model across several processes (or machines) with MLX's distributed backend.

Pipeline parallel: the model's decoder layers are cut into contiguous slices, one per rank
(``layer_split``); rank 0 holds the first slice. In a forward pass every rank embeds the input
(for its shape), rank r > 0 receives the hidden state from rank r - 1, runs its own layers on its
own KV caches and sends the result on to rank r + 1; the last rank's hidden state is then gathered
by every rank, so all of them compute the same logits and sample the same tokens (``pipeline``).
So every rank runs the same steps in the same order (SPMD, as mlx-lm's own pipelined models do)
and keeps only the KV of its own layers.

Tensor parallel (``tensor``, chosen by the hosts file: ``hosts``): every rank holds every layer,
cut by mlx-lm's own ``model.shard(group)`` into its share of the heads and MLP columns, and the
ranks add their partial outputs after each attention and MLP; the step plans, the block cache
(each rank's heads) and the failure handling are pipeline mode's.

``generate`` runs a model split this way on the prompts it is given (greedy), one process per
rank as ``mlx.launch`` starts them: the check that a split model writes what one process writes.
``omlx serve --distributed`` serves a split model: rank 0's engine (``engine``, ``leader_runner``),
the other ranks (``follower``), each rank's block cache of its own layers (``rank_cache``), the
timeout that finds a hung rank (``watchdog``); see docs/operations.md.
"""
