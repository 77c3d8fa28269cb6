"""The reports' data: MLflow runs -> the tidy score table (:mod:`.collect`, :mod:`.tidy`), and each
axis point's base-model rows (:mod:`.bases`).
"""
