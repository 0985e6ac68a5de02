"""Training (Section 3, Appendix D.2): AdamW, polynomial decay after a linear warm-up, loss on
the output tokens only, checkpoints that survive a kill and resume to the same weights.

- :mod:`probe.training.train_config`: :class:`~probe.training.train_config.TrainConfig` (what decides a
  run's weights: the preset's recipe from :mod:`probe.presets`, overrides, the protocol) and the
  learning-rate schedule;
- :mod:`probe.training.optimizer`: AdamW and its weight-decay groups, per protocol;
- :mod:`probe.training.loop`: :class:`~probe.training.loop.Trainer`, one run's model, optimizer, resumable
  state and steps;
- :mod:`probe.training.stacked`: stacked runs, those that read one batch stream (a study's PEs at one
  seed, one :func:`~probe.training.stacked.stack_key`), trained as one program
  (:func:`~probe.training.stacked.train_stack`), each the run it is alone; one of them is a run trained alone;
- :mod:`probe.training.steps`: how a step executes (eager, compiled, captured as a CUDA graph);
- :mod:`probe.training.background`: states written and batches cut off the training thread;
- :mod:`probe.training.bookkeeping`: :func:`~probe.training.bookkeeping.train_run` and
  :func:`~probe.training.bookkeeping.train_stacked`, run folders from nothing (or a kill) to published,
  locked meanwhile; whether a folder is complete and trained as asked;
- :mod:`probe.training.parallel`: :func:`~probe.training.parallel.train_runs`, runs side by side
  (``--jobs``) or stack by stack (``--stack``), what ``probe train`` calls.

A run lives in its run folder (``probe.runs.folders.run_dir``). While it trains, ``train_state.safetensors``
(weights, optimizer moments, RNG, data position, all in one atomically replaced file) is written
every ``checkpoint_every`` steps; the published checkpoint (``model.safetensors`` + ``config.json``)
is written at the end, when the IID accuracy is known. ``metrics.jsonl`` gets one line per log.
States are written by a thread of their own; a kill mid-write leaves the previous one.

Two protocols. ``probe``'s: ``<bos>`` first, batches of one length, dropout on the embedding and
the sublayer outputs, the last step published. The ``authors``' (the default on the paper's splits,
``split=paper``), read from McGill-NLP/length-generalization at 40f8a44: their sequence format (no
``<bos>``, their separator), batches drawn at random, dropout where their T5 stack has it
(:mod:`probe.training.dropout`), RMSNorm eps 1e-6, and the best checkpoint on IID validation published
(:mod:`probe.training.selection`), the last step's kept beside it in ``last/``.
"""
