"""Statistics, and the one decision engine of adaptive seeds: what the launcher and the reports
both decide from the runs' scores.

Modules: ``inference`` (t and bootstrap intervals, Welch and pooled tests, corrections,
probability of improvement, separated ranks), ``spending`` (the alpha-spending functions, the
group-sequential bounds and their small-df calibration), ``sequential`` (one table's looks: the
stopping rules, ``Design`` and ``decide``), ``rounds`` (a plan's rounds replayed from the scores:
which cells the launcher may start, why each row stopped). The launcher (:mod:`gppo.sweep`)
plays the rounds with :class:`~gppo.stats.rounds.Rounds`; the reports (:mod:`gppo.analysis`)
replay the same ones; nothing here is computed twice.
"""
