"""gppo-sweep: the GPPO Divergence x Estimator design space as Ray jobs tracked in MLflow."""

__version__ = "0.1.0"
