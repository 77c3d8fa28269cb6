"""What a sweep will cost and the budget it keeps: the forecast (:mod:`.forecast`), what ``plan``
prints under its table (:mod:`.plan_summary`), the budget (:mod:`.budget`).
"""
