"""`probe extrapolate`: each run under each inference-time intervention, beside itself untouched.

:func:`~probe.extrapolation.extrapolate.extrapolate` is one function over the scorer a subject's measure
names: exact match for task runs (:mod:`~probe.extrapolation.tasks`), perplexity for language models
(:mod:`~probe.extrapolation.language_models`). Both share :mod:`~probe.extrapolation.plan` (settings, the
interventions each model takes, bootstrap intervals) and :mod:`~probe.extrapolation.tuning` (interventions
tuned on a validation slice); :mod:`~probe.extrapolation.report` is what it found.
"""
