"""What the user watches: ``status``, ``logs`` and ``cancel`` (:mod:`.commands`), the live table on a
terminal (:mod:`.terminal`), the launch as a log (:mod:`.launch_log`), the MLflow UI server
(:mod:`.mlflow_ui`, its app :mod:`.mlflow_ui_app`).
"""
